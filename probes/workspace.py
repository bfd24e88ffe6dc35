"""The doctor's one temporary folder per run.

Every payload, the job's folder, torchrun's logs and whatever the ranks write to TMPDIR go
below it: while it is open, Python's tempfile puts new temporary files and folders there. It
is registered before anything starts, so a signal removes it with all it holds
(runner.stop_everything), and the patients' watchdogs remove it if the doctor is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ddp_doctor.probes.runner import kill_children, owned_folder

PREFIX = "ddp-doctor-"
_current: list[Path] = []


class WorkspaceUnavailable(OSError):
    """No temporary folder can be made anywhere: the doctor cannot run its probes."""


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    try:
        folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    except OSError as error:  # also what gettempdir() raises when no candidate is usable
        raise WorkspaceUnavailable(
            f"no usable temporary folder ({error.strerror or error}); set TMPDIR to a "
            "writable folder"
        ) from None
    previous = tempfile.tempdir
    with owned_folder(folder):
        tempfile.tempdir = str(folder)
        _current.append(folder)
        try:
            yield folder
        finally:
            _current.remove(folder)
            tempfile.tempdir = previous
            kill_children()  # a probe abandoned at its time limit may still run in here


def current_workspace() -> Path | None:
    return _current[-1] if _current else None
