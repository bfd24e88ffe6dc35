"""Inside the patient: end this process soon after the doctor that started it dies.

torchrun starts each rank in a session of its own, so a SIGKILL of the doctor (or of a shell
that held it) would leave the ranks running until their own timeouts. Every patient-side
entry point calls `watch_doctor()`: a daemon thread that checks twice a second whether the
doctor's process (pid and start time, from DDP_DOCTOR_WATCH) still exists; when it does not,
it removes the doctor's temporary folder (DDP_DOCTOR_FOLDER), which nobody else is left to
remove, and SIGKILLs its own process group and itself. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

WATCH_VARIABLE = "DDP_DOCTOR_WATCH"
FOLDER_VARIABLE = "DDP_DOCTOR_FOLDER"
FOLDER_PREFIX = "ddp-doctor-"  # the only folders the watchdog ever removes
INTERVAL_S = 0.5


def watch_doctor(environ: dict | None = None) -> bool:
    """Starts the watchdog when the variable names a doctor; True when it is watching."""
    environ = environ if environ is not None else dict(os.environ)
    pid, _, started = environ.get(WATCH_VARIABLE, "").partition(":")
    if not pid.isdigit():
        return False
    folder = environ.get(FOLDER_VARIABLE) or None
    thread = threading.Thread(
        target=_watch, args=(int(pid), started, folder), name="ddp-doctor-watchdog", daemon=True
    )
    thread.start()
    return True


def process_alive(pid: int, started: str) -> bool:
    """The process runs (a zombie does not) and is the one that started at `started` (its
    /proc start time; empty or 0: the pid alone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return _exists(pid)  # no /proc (macOS): the pid alone
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):  # a zombie, or dead
        return False
    return started in ("", "0") or (len(fields) > 19 and fields[19] == started)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(pid: int, started: str, folder: str | None) -> None:
    while process_alive(pid, started):
        time.sleep(INTERVAL_S)
    if folder and os.path.basename(os.path.normpath(folder)).startswith(FOLDER_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
    if os.getpgid(0) == os.getpid():  # this process leads its group (a rank): take it along
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
