"""Jobs for the attach tests, started by plain torchrun (or mp.spawn), never by the doctor:
each case's script from fixtures/attach, a ready marker per rank, and the whole job killed in
the end, so a test leaves nothing running."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "attach"
BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 90.0  # two ranks importing torch on a loaded 2-core machine
ATTACH_TIMEOUT_S = 60.0


def line_of(script: str, text: str) -> int:
    """The line of a fixture script that holds text (so a test names no line numbers)."""
    lines = (FIXTURES / script).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


@dataclass
class Job:
    process: subprocess.Popen
    ready_dir: Path
    log: Path

    def wait_ready(self, ranks: int = 2, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(list(self.ready_dir.iterdir())) >= ranks:
                return
            if self.process.poll() is not None:
                raise AssertionError(f"the job ended early:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"ranks not ready in {timeout_s} s:\n{self.log.read_text()[-3000:]}")

    def ranks(self) -> list[psutil.Process]:
        """The job's processes below the launcher (ranks and their workers)."""
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def snapshot(self) -> dict[int, str]:
        """pid -> "stopped", "zombie" or "alive" for every process of the job: the same
        before and after attach, for a job whose own processes stop or die on purpose (a
        live one's running or sleeping changes by itself)."""
        states = {}
        for process in self.ranks():
            with contextlib.suppress(psutil.Error):
                status = process.status()
                states[process.pid] = status if status in ("stopped", "zombie") else "alive"
        return states

    def untouched(self) -> bool:
        """Still running, no process of it stopped or gone."""
        if self.process.poll() is not None:
            return False
        return all(p.status() not in ("stopped", "zombie") for p in self.ranks() if _alive(p))


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.is_running()
    return False


@contextlib.contextmanager
def running(
    script: str,
    tmp_path: Path,
    launcher: Sequence[str] | None = None,
    prefix: Sequence[str] = (),
    args: Sequence[str] = (),
    pythonpath: Sequence[str] = (),
) -> Iterator[Job]:
    # A job of another user needs a folder it can enter: pytest's own is root's alone.
    work = Path(tempfile.mkdtemp(prefix="ddp-doctor-attach-test-")) if prefix else tmp_path
    work.chmod(0o777)
    ready = work / "ready"
    ready.mkdir()
    ready.chmod(0o777)
    log = tmp_path / "job.log"
    env = {
        **os.environ,
        "ATTACH_READY_DIR": str(ready),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(FIXTURES), *pythonpath]),
    }
    if launcher is None:
        launcher = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    argv = [*prefix, *launcher, str(FIXTURES / script), *args]
    with open(log, "wb") as output:
        process = subprocess.Popen(
            argv,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=work,
            start_new_session=True,
        )
    job = Job(process, ready, log)
    try:
        yield job
    finally:
        _kill(job)
        if work != tmp_path:
            shutil.rmtree(work, ignore_errors=True)


def _kill(job: Job) -> None:
    """The test's own job, and every process below it, whatever session they moved to."""
    everything = [*job.ranks()]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.process.pid, signal.SIGKILL)
    for process in everything:
        with contextlib.suppress(psutil.Error):
            process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        job.process.wait(timeout=10)
    psutil.wait_procs(everything, timeout=10)


def as_nobody() -> dict[str, object]:
    """running()'s arguments for a job run as user nobody: the system Python 3.11 with this
    environment's packages on its path (nobody may not enter the folder the virtualenv's
    interpreter lives in), under setpriv."""
    import sysconfig

    return {
        "prefix": ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        "launcher": [
            "/usr/bin/python3",
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
        ],
        "pythonpath": [sysconfig.get_paths()["purelib"]],
    }


@dataclass
class Attached:
    returncode: int
    report: dict[str, Any]
    seconds: float
    stderr: str

    @property
    def codes(self) -> list[str]:
        return [f["code"] for f in self.report["findings"]]

    def finding(self, code: str) -> dict[str, Any]:
        return next(f for f in self.report["findings"] if f["code"] == code)

    @property
    def facts(self) -> dict[str, Any]:
        return next(p["facts"] for p in self.report["probes"] if p["probe"] == "attach")


def attach(target: int, *options: str, prefix: Sequence[str] = ()) -> Attached:
    argv = [*prefix, sys.executable, "-m", "ddp_doctor", "attach", str(target), "--format", "json"]
    started = time.monotonic()
    done = subprocess.run(
        [*argv, "--interval", "2", *options],
        capture_output=True,
        text=True,
        timeout=ATTACH_TIMEOUT_S,
    )
    seconds = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"no JSON report: rc {done.returncode}, {done.stderr[-2000:]}"
        ) from None
    return Attached(done.returncode, report, seconds, done.stderr)


def free_port() -> int:
    """A TCP port free now, for a job whose launcher takes one (plain processes, mp.spawn)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_status(job: Job, status: str, timeout_s: float = 30.0) -> list[psutil.Process]:
    """The job's processes in `status` (psutil's: stopped, zombie) once one is, read from
    /proc only: a case whose job stops or kills a process of its own waits for it here."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = []
        for process in job.ranks():
            with contextlib.suppress(psutil.Error):
                if process.status() == status:
                    found.append(process)
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no process of the job became {status} in {timeout_s:g} s")
