"""nn.DataParallel's replica error: the wrapper's line, then the replica's own traceback.

    RuntimeError: Caught RuntimeError in replica 1 on device 1.
    Original Traceback (most recent call last):
      File ".../torch/nn/parallel/parallel_apply.py", line 61, in _worker
        output = module(*input, **kwargs)
      ...
    RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; ...)

The replica's error (the first unindented line after the frames) is the problem; the wrapper's
line only says where it happened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b.*:")
MAX_BLOCK_LINES = 400  # a replica traceback is a few dozen lines
MAX_LINES_BEFORE_TRACEBACK = 3
ERROR_CHARS = 300


@dataclass
class ReplicaErrorBlock:
    """Fed the lines after "Caught X in replica N on device M." of one speaker."""

    start_line: int
    task: int | None
    facts: dict[str, object]  # what the wrapper's line said
    text: str  # the wrapper's line, the evidence
    error: str | None = None
    error_line: int | None = None
    done: bool = False
    _lines_seen: int = 0
    _in_traceback: bool = False
    _frames: int = field(default=0)

    def accepts(self, task: int | None) -> bool:
        return not self.done and (self.task is None or task == self.task)

    def feed(self, body: str, number: int, indent: int) -> None:
        self._lines_seen += 1
        stripped = body.strip()
        if self._lines_seen > MAX_BLOCK_LINES:
            self.done = True
        elif not stripped:
            return
        elif not self._in_traceback and indent == 0 and _EXCEPTION.match(stripped):
            # a paste that lost the replica's frames: its error right below the wrapper's line
            self.error, self.error_line, self.done = stripped[:ERROR_CHARS], number, True
        elif not self._in_traceback:
            self._in_traceback = stripped.startswith(("Original Traceback", "Traceback"))
            self.done = not self._in_traceback and self._lines_seen > MAX_LINES_BEFORE_TRACEBACK
        elif indent >= 2 or stripped.startswith(("File ", "^", "~")):
            self._frames += 1
        else:
            self.error, self.error_line, self.done = stripped[:ERROR_CHARS], number, True
