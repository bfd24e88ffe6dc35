"""The one way probes start other programs: bounded, and killed with their children."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it was killed for running past its time
    stdout: str
    stderr: str
    duration_s: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_command(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> CommandResult:
    """Runs argv in its own process group; past `timeout_s` the whole group is killed."""
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as error:
        return CommandResult(tuple(argv), 127, "", str(error), time.monotonic() - started)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        kill_group(process)
        stdout, stderr = process.communicate()
        returncode = None
    return CommandResult(tuple(argv), returncode, stdout, stderr, time.monotonic() - started)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILLs the process and everything in its process group."""
    if not hasattr(os, "killpg"):  # Windows: no process groups of this kind
        process.kill()
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
