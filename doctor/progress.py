"""What the doctor says on stderr while it works.

In a terminal: one status line, rewritten in place, with the one timer. Elsewhere (CI, a pipe)
nothing, unless the operation asks for a heartbeat: then the status as a plain line at most
every `heartbeat_s` seconds, so a long `trace` in CI shows it is alive. Lines of the traced
run's own output go to stderr in both cases, the status line cleared and redrawn around them.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        stream: TextIO | None,
        lines: TextIO | None = None,
        heartbeat_s: float | None = None,
    ) -> None:
        self.stream = stream  # the terminal for the status line, or None
        self.lines = lines  # where full lines go (the run's output, the heartbeat)
        self.heartbeat_s = heartbeat_s
        self.started = time.monotonic()
        self.width = 0
        self.status = ""
        self.last_beat: float | None = None
        self.lock = threading.Lock()

    @classmethod
    def to_stderr(cls, heartbeat_s: float | None = None) -> Progress:
        terminal = sys.stderr.isatty()
        return cls(sys.stderr if terminal else None, sys.stderr, None if terminal else heartbeat_s)

    def say(self, line: str) -> None:
        with self.lock:
            self.status = line
            if self.stream is not None:
                self._draw()
            elif self.heartbeat_s is not None and self.lines is not None:
                now = time.monotonic()
                if self.last_beat is None or now - self.last_beat >= self.heartbeat_s:
                    self.last_beat = now
                    self.lines.write(f"{line}  [{now - self.started:.0f} s]\n")
                    self.lines.flush()

    def line(self, text: str) -> None:
        """A whole line (of the traced run's output) on stderr, above the status line."""
        with self.lock:
            stream = self.stream or self.lines
            if stream is None:
                return
            if self.stream is not None and self.width:
                stream.write("\r" + " " * self.width + "\r")
            stream.write(text + "\n")
            if self.stream is not None and self.status:
                self._draw()
            stream.flush()

    def done(self) -> None:
        with self.lock:
            if self.stream is not None and self.width:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
            self.width = 0
            self.status = ""

    def _draw(self) -> None:
        assert self.stream is not None
        text = f"{self.status}  [{time.monotonic() - self.started:.1f} s]"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)
