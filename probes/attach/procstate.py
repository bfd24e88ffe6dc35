"""What /proc tells of one process without ptrace: state, CPU time, wait channel, threads,
memory, TCP connections, and its children's states."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from ddp_doctor.facts.attach import ChildProcess

GONE = "gone"


@dataclass(frozen=True)
class ProcState:
    state: str
    cpu_s: float | None = None
    wchan: str | None = None
    threads: int | None = None
    rss_bytes: int | None = None
    main_cpu_s: float | None = None
    main_switches: int | None = None


def read_state(pid: int) -> ProcState:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            state = process.status()
            cpu = _cpu(process)
            threads = _optional(process.num_threads)
            memory = _optional(process.memory_info)
    except psutil.NoSuchProcess:
        return ProcState(GONE)
    except psutil.AccessDenied:
        return ProcState("unknown")
    rss = memory.rss if memory is not None else None
    main_cpu, switches = main_thread(pid)
    return ProcState(str(state), cpu, wchan(pid), threads, rss, main_cpu, switches)


def main_thread(pid: int) -> tuple[float | None, int | None]:
    """The main thread's own CPU time and context switches (the process's totals include
    the backend's threads, which stay busy while the training loop is stuck)."""
    task = Path(f"/proc/{pid}/task/{pid}")
    try:
        stat = (task / "stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        cpu = None
    try:
        status = (task / "status").read_text()
        switches = sum(
            int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line
        )
    except (OSError, ValueError, IndexError):
        switches = None
    return (round(cpu, 3) if cpu is not None else None), switches


def _cpu(process: psutil.Process) -> float | None:
    times = _optional(process.cpu_times)
    return None if times is None else round(times.user + times.system, 3)


def _optional(call):  # type: ignore[no-untyped-def]
    try:
        return call()
    except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def wchan(pid: int) -> str | None:
    """The kernel function the process sleeps in; "0" (or nothing) while it runs, or where
    the kernel hides it from this reader."""
    try:
        text = Path(f"/proc/{pid}/wchan").read_text(errors="replace").strip()
    except OSError:
        return None
    return text if text and text != "0" else None


def children(pid: int) -> tuple[ChildProcess, ...]:
    try:
        kids = psutil.Process(pid).children()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ()
    found = []
    for kid in kids:
        try:
            with kid.oneshot():
                state, cmdline, cpu = str(kid.status()), _cmdline(kid), _cpu(kid)
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            state, cmdline, cpu = "unknown", "", None
        found.append(ChildProcess(kid.pid, state, cmdline, cpu))
    return tuple(found)


def _cmdline(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return " ".join(process.cmdline())
    return ""


def sockets(pid: int) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(established peers as "addr:port", listening TCP ports)."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
        return (), ()
    peers = sorted(
        {
            f"{c.raddr.ip}:{c.raddr.port}"
            for c in connections
            if c.raddr and c.status == psutil.CONN_ESTABLISHED
        }
    )
    listening = sorted({c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN})
    return tuple(peers), tuple(listening)
