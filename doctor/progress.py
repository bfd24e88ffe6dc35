"""One status line on stderr while `run` works, only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.started = time.monotonic()
        self.width = 0

    @classmethod
    def to_stderr(cls) -> Progress:
        return cls(sys.stderr if sys.stderr.isatty() else None)

    def say(self, line: str) -> None:
        if self.stream is None:
            return
        text = f"{line}  [{time.monotonic() - self.started:.1f} s]"
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def done(self) -> None:
        if self.stream is not None and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
