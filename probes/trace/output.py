"""The traced run's own output: shown live on the doctor's stderr, each rank's lines prefixed
`[rankN]: ` (as torchrun's --tee labels its workers), and a bounded tail kept for the report.

Each rank writes into a FIFO of its own (patient/trace/output.py); the launcher's own output
(torchrun's messages, a Python that fails before the monitor runs) comes through one pipe and is
shown as it is. Nothing goes to disk: the tail is a ring of the last TAIL_CHARS in memory, so
a run that prints gigabytes never fills a disk and the report stays small. Control characters
are shown escaped, never passed to a terminal; a carriage return keeps what a terminal would
show (the last tqdm update of a line).
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ddp_doctor.patient.trace.output import OUTPUT_FOLDER

__all__ = ["OUTPUT_FOLDER", "LiveOutput", "OutputTail", "Show"]

TAIL_CHARS = 64 * 1024  # what the report keeps (report_io.OUTPUT_TAIL_CHARS)
LINE_BYTES = 16 * 1024  # a line longer than this is shown in pieces
READ_BYTES = 64 * 1024
JOIN_S = 2.0  # after the run, to read what is still in the pipes
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")
Show = Callable[[str], None]


class OutputTail:
    """The last `limit` characters of lines, as a ring; thread-safe."""

    def __init__(self, limit: int = TAIL_CHARS) -> None:
        self.limit = limit
        self.lines: collections.deque[str] = collections.deque()
        self.size = 0
        self.total = 0
        self.lock = threading.Lock()

    def add(self, lines: list[str]) -> None:
        """Sizes in characters, as the report counts its tail (report_io.OUTPUT_TAIL_CHARS)."""
        with self.lock:
            for line in lines:
                self.lines.append(line)
                self.size += len(line) + 1
                self.total += len(line) + 1
            while self.size > self.limit and len(self.lines) > 1:
                self.size -= len(self.lines.popleft()) + 1

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.lines) + ("\n" if self.lines else "")


def shown(raw: bytes) -> str:
    """One line as a terminal may show it: after the last carriage return, controls escaped."""
    text = raw.decode("utf-8", "replace").rstrip("\r")
    text = text.rsplit("\r", 1)[-1]
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class LiveOutput:
    """Reads the launcher's pipe and every rank's FIFO in threads; `show` gets each line."""

    def __init__(self, folder: Path, show: Show | None) -> None:
        self.folder = folder
        self.show = show
        self.tail = OutputTail()
        self.threads: list[threading.Thread] = []
        self.opened: set[str] = set()
        self.lock = threading.Lock()

    def read_launcher(self, stream: BinaryIO) -> None:
        self._start(lambda: self._pump(stream, ""), "trace-output-launcher")

    def look_for_ranks(self) -> None:
        """Opens the FIFOs of ranks that started since the last look (called every poll)."""
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.folder):
                if entry.name.endswith(".fifo") and entry.name not in self.opened:
                    self.opened.add(entry.name)
                    prefix = f"[{entry.name.split('.', 1)[0]}]: "
                    path = Path(entry.path)
                    self._start(lambda p=path, x=prefix: self._rank(p, x), f"trace-{entry.name}")

    def finish(self) -> str:
        """Reads what is left once the run is over; the tail for the report."""
        self.look_for_ranks()
        for name in self.opened:  # a FIFO whose rank died before opening it: end its reader
            with contextlib.suppress(OSError):
                os.close(os.open(self.folder / name, os.O_WRONLY | os.O_NONBLOCK))
        for thread in self.threads:
            thread.join(JOIN_S)
        return self.tail.text()

    def _start(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _rank(self, path: Path, prefix: str) -> None:
        try:
            descriptor = os.open(path, os.O_RDONLY)  # waits for the rank's end, as it opens it
        except OSError:
            return
        with os.fdopen(descriptor, "rb", buffering=0) as stream:
            self._pump(stream, prefix)

    def _pump(self, stream: BinaryIO, prefix: str) -> None:
        pending = b""
        while True:
            try:  # what is there now, not READ_BYTES: a line shows as soon as it is written
                chunk = os.read(stream.fileno(), READ_BYTES)
            except (OSError, ValueError):
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            while len(pending) > LINE_BYTES:
                lines.append(pending[:LINE_BYTES])
                pending = pending[LINE_BYTES:]
            if lines:
                self._lines([prefix + shown(line) for line in lines])
        if pending:
            self._lines([prefix + shown(pending)])

    def _lines(self, lines: list[str]) -> None:
        """One chunk's lines at once: one write to the terminal, one lock for the ring."""
        self.tail.add(lines)
        if self.show is not None:
            with self.lock, contextlib.suppress(OSError, ValueError):
                self.show("\n".join(lines))
