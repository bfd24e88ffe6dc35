"""Reading the files a user hands the doctor: only regular files, never blocking, bounded.

`check`, `logs` and `diagnose` (and the config files `check` reads) open what they are given
through here. A FIFO, a device or a socket is refused before it is opened (an open() of a FIFO
with no writer blocks forever; /dev/zero never ends), and again on the opened descriptor, in
case the path was swapped in between; the open itself uses O_NONBLOCK so that even that race
cannot block.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularFile(OSError):
    """The path is a folder, FIFO, device or socket: nothing the doctor reads."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{kind}, not a regular file")
        self.path = path
        self.kind = kind
        self.strerror = f"{kind}, not a regular file"

    def __str__(self) -> str:
        return self.strerror


class TooLarge(OSError):
    """The file is over the limit the caller reads."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        self.path, self.size, self.limit = path, size, limit
        super().__init__(f"{describe_size(size)} is over the {describe_size(limit)} limit")
        self.strerror = str(self.args[0])

    def __str__(self) -> str:
        return self.strerror


def describe_size(size: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size} bytes"


def non_regular_kind(mode: int) -> str | None:
    """What the file is when it is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """The regular file at `path`, opened for binary reading; raises NotRegularFile for
    anything else, and OSError as open() does."""
    name = os.fspath(path)
    kind = non_regular_kind(os.stat(name).st_mode)
    if kind is not None:
        raise NotRegularFile(name, kind)
    descriptor = os.open(name, _OPEN_FLAGS)
    try:
        kind = non_regular_kind(os.fstat(descriptor).st_mode)
        if kind is not None:
            raise NotRegularFile(name, kind)
        _clear_nonblocking(descriptor)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_capped(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole regular file, or TooLarge when it holds more than `limit` bytes (the file is
    never read past limit + 1 bytes, whatever its size says)."""
    with open_regular(path) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > limit:
            raise TooLarge(os.fspath(path), size, limit)
        data = stream.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise TooLarge(os.fspath(path), len(data), limit)
    return data


def _clear_nonblocking(descriptor: int) -> None:
    if not hasattr(os, "set_blocking"):  # Windows: the flag was never set
        return
    os.set_blocking(descriptor, True)
