"""Inside a traced rank: its stdout and stderr into a FIFO of its own, which the doctor reads
and prints live with a `[rankN]: ` prefix (as torchrun's --tee labels its workers).

The file descriptors 1 and 2 themselves move, so C++ and NCCL output, faulthandler and the
children the rank starts (DataLoader workers, mp.spawn) are labelled too, and what a rank wrote
before it died is already in the pipe, for the doctor to read. Without a doctor reading (it
never opened its end within the wait), the rank keeps its streams as they were.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from pathlib import Path

OUTPUT_FOLDER = "output"
OPEN_WAIT_S = 5.0


def route_output(folder: Path, rank: int) -> bool:
    """True when fds 1 and 2 now go to the doctor through this rank's FIFO."""
    if not hasattr(os, "mkfifo"):
        return False
    path = folder / OUTPUT_FOLDER / f"rank{rank}.{os.getpid()}.fifo"
    try:
        os.mkfifo(path, 0o600)
    except OSError:
        return False
    descriptor = _open_writer(path)
    if descriptor is None:
        return False
    os.set_blocking(descriptor, True)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.close(descriptor)
    return True


def _open_writer(path: Path) -> int | None:
    """The FIFO's writing end once the doctor has opened its reading end (it looks for new
    FIFOs every 0.2 s); None after OPEN_WAIT_S, the FIFO then removed."""
    deadline = time.monotonic() + OPEN_WAIT_S
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO or time.monotonic() > deadline:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                return None
        time.sleep(0.02)
