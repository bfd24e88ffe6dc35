"""A rank's Python stacks, every thread, through py-spy (`py-spy dump --json`), bounded in time.

py-spy pauses the process only while it reads the stacks (milliseconds); `--nonblocking` is
not used because a hung rank's stack is what matters and it does not move anyway. `--locals`
is read for one purpose: the integer step counters of the main thread's frames (their names
say so), whose change between samples is the step rate; every other local is dropped here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

from ddp_doctor.facts.attach import LoopCounter, ThreadStack
from ddp_doctor.facts.trace import Site
from ddp_doctor.probes.runner import run_command

MAX_THREADS = 64
MAX_FRAMES = 80  # innermost frames kept per thread
REFUSED_WORDS = ("Permission denied", "Operation not permitted", "os error 13", "os error 1)")
# Names of a loop's step counter: step, global_step, steps_done, iteration, it, i, batch_idx ...
COUNTER_NAME = re.compile(
    r"^(?:\w*steps?\w*|\w*iter\w*|it|i|n|idx|batch_?(?:idx|index|i|num|number)|number|count)$", re.I
)
INTEGER = re.compile(r"^-?\d{1,18}$")
MAX_COUNTERS = 16


@dataclass(frozen=True)
class Dump:
    threads: tuple[ThreadStack, ...] = ()
    error: str | None = None
    refused: bool = False  # the kernel refused ptrace (or reading the process's memory)
    counters: tuple[LoopCounter, ...] = ()  # the main thread's step counters
    timed_out: bool = False


def find_py_spy() -> str | None:
    """py-spy installed beside this Python (the doctor's own dependency), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("py-spy")


def dump(py_spy: str, pid: int, timeout_s: float, native: bool = False) -> Dump:
    """Stacks with the locals (for the step counters); where reading the locals fails and the
    kernel did not refuse, once more without them, within the same time."""
    started = time.monotonic()
    found = _dump(py_spy, pid, timeout_s, native, with_locals=True)
    left = timeout_s - (time.monotonic() - started)
    if found.error and not found.refused and not found.timed_out and left > 0.2:
        return _dump(py_spy, pid, left, native, with_locals=False)
    return found


def _dump(py_spy: str, pid: int, timeout_s: float, native: bool, with_locals: bool) -> Dump:
    argv = [py_spy, "dump", "--pid", str(pid), "--json"]
    argv += ["--locals"] * with_locals + ["--native"] * native
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    result = run_command(argv, timeout_s, env=env)
    if result.timed_out:
        return Dump(error=f"py-spy did not answer within {timeout_s:g} s", timed_out=True)
    if result.returncode != 0:
        return _failed(result.stderr or result.stdout)
    try:
        data = json.loads(result.stdout)
        return Dump(threads=parse_dump(data), counters=main_counters(data))
    except (ValueError, TypeError, KeyError) as error:
        return Dump(error=f"py-spy's output could not be read: {error}")


def _failed(text: str) -> Dump:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    refused = any(word in text for word in REFUSED_WORDS)
    first = next((line for line in lines if not line.startswith(("Stack backtrace", "0:"))), "")
    reason = next((line for line in lines if any(w in line for w in REFUSED_WORDS)), "")
    message = " ".join(dict.fromkeys(p for p in (first, reason) if p))[:300]
    return Dump(error=message or "py-spy failed without a message", refused=refused)


def parse_dump(data: Any) -> tuple[ThreadStack, ...]:
    """py-spy's JSON (a list of threads, frames innermost first) to ThreadStacks."""
    if not isinstance(data, list):
        raise ValueError("not a list of threads")
    threads = []
    for thread in data[:MAX_THREADS]:
        frames = tuple(
            Site(str(f.get("filename", "")), int(f.get("line") or 0), str(f.get("name", "")))
            for f in thread.get("frames", ())[:MAX_FRAMES]
        )
        threads.append(
            ThreadStack(
                thread_id=int(thread.get("os_thread_id") or thread.get("thread_id") or 0),
                name=str(thread.get("thread_name") or ""),
                idle=not bool(thread.get("active", True)),
                frames=frames,
            )
        )
    return tuple(threads)


def main_counters(data: Any) -> tuple[LoopCounter, ...]:
    """The integer locals named like a step counter in the main thread's frames (py-spy's
    --locals gives each local's repr; only a plain integer's is kept)."""
    if not isinstance(data, list) or not data:
        return ()
    named = [t for t in data if isinstance(t, dict) and t.get("thread_name") == "MainThread"]
    thread = named[0] if named else data[0]
    found = []
    for frame in thread.get("frames", ())[:MAX_FRAMES]:
        for local in frame.get("locals") or ():
            name, text = str(local.get("name", "")), str(local.get("repr", "")).strip()
            if COUNTER_NAME.match(name) and INTEGER.match(text):
                path, function = str(frame.get("filename", "")), str(frame.get("name", ""))
                found.append(LoopCounter(path, function, name, int(text)))
    return tuple(found[:MAX_COUNTERS])
