"""The standard streams, made safe before any command runs, and written to with one clear line
for every way they fail.

A closed stdin, stdout or stderr (`2>&-`, a daemon, a CI step) leaves its descriptor free: the
next file the doctor opens would get it, and a report could land in a log it is reading.
Each closed one is replaced by /dev/null. A closed stdout is remembered, so a report that has
nowhere to go says so instead of vanishing. A reader that goes away (`| head`) ends the
output quietly, as for any Unix tool; a full disk or an I/O error is one line and exit 2.
"""

from __future__ import annotations

import errno
import io
import os
import sys

CLOSED: set[int] = set()  # descriptors that were closed when the doctor started


class OutputFailed(OSError):
    """The report could not be written to standard output (not a reader that went away)."""


def guard_standard_streams() -> None:
    """Puts /dev/null on every standard descriptor that is closed (and on Python's stream)."""
    for descriptor, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if _is_open(descriptor) and getattr(sys, name) is not None:
            continue
        CLOSED.add(descriptor)
        null = os.open(os.devnull, os.O_RDONLY if mode == "r" else os.O_WRONLY)
        if null != descriptor:
            os.dup2(null, descriptor)
            os.close(null)
        setattr(sys, name, io.TextIOWrapper(io.FileIO(descriptor, mode, closefd=False)))


def stdin_closed() -> bool:
    return 0 in CLOSED


def stdout_closed() -> bool:
    return 1 in CLOSED


def _is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


def write_stdout(text: str) -> None:
    """Writes and flushes; a reader that went away ends the output quietly (EPIPE), any other
    failure raises OutputFailed with the reason."""
    stream = sys.stdout
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        silence_stdout()
    except UnicodeEncodeError:  # an ASCII-only locale: the report's own characters replaced
        data = text.encode(getattr(stream, "encoding", None) or "ascii", "replace")
        _write_bytes(data)
    except OSError as error:
        silence_stdout()
        raise OutputFailed(error.errno, error.strerror or str(error)) from None


def _write_bytes(data: bytes) -> None:
    try:
        sys.stdout.flush()
        os.write(1, data)
    except BrokenPipeError:
        silence_stdout()
    except OSError as error:
        silence_stdout()
        raise OutputFailed(error.errno, error.strerror or str(error)) from None


def silence_stdout() -> None:
    """Nothing more goes to stdout, and Python's flush at exit finds nothing to complain of."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
    finally:
        os.close(null)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False))


def is_reader_gone(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno == errno.EPIPE
