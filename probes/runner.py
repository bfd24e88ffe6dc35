"""The one way probes start other programs: bounded, and killed with their children."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Children still running, with the folder each one uses, and the doctor's own folders: on a
# signal the CLI kills and removes them all (stop_everything), since the threads that would
# have are abandoned then. Once stopping, a child that starts anyway is killed at once.
_LIVE: dict[int, tuple[subprocess.Popen, Path | None]] = {}
_FOLDERS: set[Path] = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()
PR_SET_PDEATHSIG = 1  # linux/prctl.h
RESOURCE_ERRORS = (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE)


class Stopping(Exception):
    """The doctor is stopping (a signal): nothing new may start."""


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it was killed for running past its time
    stdout: str
    stderr: str
    duration_s: float
    spawn_error: OSError | None = None  # the child could not be started at all

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def out_of_resources(self) -> bool:
        """Not started for want of processes, memory or descriptors: the doctor's problem,
        not the program's."""
        return self.spawn_error is not None and self.spawn_error.errno in RESOURCE_ERRORS


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
            preexec_fn=die_with_parent(),
        )
    except OSError as error:
        return CommandResult(tuple(argv), 127, "", str(error), time.monotonic() - started, error)
    with tracked(process):
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
            returncode: int | None = process.returncode
        except subprocess.TimeoutExpired:
            kill_group(process)
            stdout, stderr = process.communicate()
            returncode = None
    return CommandResult(tuple(argv), returncode, stdout, stderr, time.monotonic() - started)


@contextlib.contextmanager
def tracked(process: subprocess.Popen, folder: Path | None = None) -> Iterator[None]:
    """Registers a running child (and its folder) until the block ends; raises Stopping (the
    child killed) when the doctor is already stopping."""
    with _LIVE_LOCK:
        stopping = _STOPPING.is_set()
        if not stopping:
            _LIVE[process.pid] = (process, folder)
    if stopping:
        kill_group(process)
        raise Stopping("the doctor is stopping")
    try:
        yield
    finally:
        with _LIVE_LOCK:
            _LIVE.pop(process.pid, None)


@contextlib.contextmanager
def owned_folder(folder: Path) -> Iterator[Path]:
    """A folder of the doctor's, removed when the block ends, or by stop_everything."""
    with _LIVE_LOCK:
        _FOLDERS.add(folder)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with _LIVE_LOCK:
            _FOLDERS.discard(folder)


def live_pids() -> list[int]:
    """The tracked children still registered (each with what runs below it)."""
    with _LIVE_LOCK:
        return list(_LIVE)


def kill_children() -> None:
    """Kills every tracked child with its descendants and removes their folders."""
    with _LIVE_LOCK:
        live = list(_LIVE.values())
        _LIVE.clear()
    for process, folder in live:
        kill_group(process)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def stop_everything() -> None:
    """From now on nothing starts; kills every tracked child with its descendants and removes
    their folders and the doctor's own."""
    _STOPPING.set()
    kill_children()
    with _LIVE_LOCK:
        folders = list(_FOLDERS)
        _FOLDERS.clear()
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that has Linux SIGKILL the child when the doctor's thread that started it
    ends, so not even a SIGKILL of the doctor leaves it running; None elsewhere."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def in_child() -> None:  # between fork and exec: only the call and two syscalls
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the doctor died before the request took effect
            os._exit(1)

    return in_child


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def has_exited(process: subprocess.Popen) -> bool:
    """True once the child has exited, without reaping it: its pid cannot be reused while we
    still kill what it left behind."""
    if not hasattr(os, "waitid"):
        return process.poll() is not None
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILLs the process, its process group, and every descendant with its own group.

    torchrun starts each rank in a new session, so killing torchrun's group alone would leave
    the ranks running: the tree is listed first (before a parent's death reparents it).
    Windows has no such groups: there the listed tree is killed process by process.
    """
    tree = [process.pid, *descendants(process.pid)]
    if not hasattr(os, "killpg"):
        _kill_each(tree)
    else:
        for pid in tree:
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                    kill(pid, signal.SIGKILL)
    _wait_gone(tree[1:])


def _wait_gone(pids: list[int], bound_s: float = 5.0) -> None:
    """A SIGKILLed process is still there until the kernel has torn it down: the ranks (in
    sessions of their own, so no child of ours to wait for) are waited for until each is gone
    or a zombie, within a bound, so that nothing of the job runs once its kill returns."""
    import psutil

    deadline = time.monotonic() + bound_s
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if _alive(psutil, pid)]
        if left:
            time.sleep(0.01)


def _alive(psutil: Any, pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False


def _kill_each(pids: list[int]) -> None:
    import psutil

    for pid in pids:
        with contextlib.suppress(psutil.Error, OSError):
            psutil.Process(pid).kill()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (psutil: /proc on Linux, sysctl on macOS, a snapshot on
    Windows); empty when it is gone or may not be looked at."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except (psutil.Error, OSError):
        return []
