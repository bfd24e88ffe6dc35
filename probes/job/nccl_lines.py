"""The job's output as the doctor keeps it, with NCCL's INFO lines apart where the doctor
itself asked NCCL for them (readings/nccl_debug.py).

Those lines were not the user's: they stay out of the output's tail, so the rules that read
the tail (its last line, torch's errors) see what they saw without them, and a few of them are
kept for the ladder: one line per distinct message (numbers aside, so 32 channels over NET/IB
are one line), at most MAX_LINES of at most MAX_LINE_CHARS, without NCCL's host:pid:tid
prefix. The file is read once, in pieces of at most READ_BYTES: memory is bounded whatever the
job printed, time by the output's size.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

MAX_LINES = 64
MAX_LINE_CHARS = 400
READ_BYTES = 64 * 1024
MARKER = b"NCCL INFO "
_NUMBERS = re.compile(r"\d+")


def split_output(path: Path, tail_bytes: int) -> tuple[str, tuple[str, ...]]:
    """(the last `tail_bytes` of the output without NCCL's INFO lines, the kept INFO lines)."""
    tail: deque[bytes] = deque()
    size, kept, seen = 0, [], set()
    try:
        with path.open("rb") as handle:
            while piece := handle.readline(READ_BYTES):
                at = piece.find(MARKER)
                if at >= 0:
                    _keep(piece[at:], kept, seen)
                    continue
                tail.append(piece)
                size += len(piece)
                while tail and size - len(tail[0]) >= tail_bytes:
                    size -= len(tail.popleft())
    except OSError:
        pass
    text = b"".join(tail)[-tail_bytes:].decode(errors="replace")
    return text, tuple(kept)


def _keep(raw: bytes, kept: list[str], seen: set[str]) -> None:
    if len(kept) >= MAX_LINES:
        return
    line = "".join(c for c in raw.decode(errors="replace") if c.isprintable())
    line = line.strip()[:MAX_LINE_CHARS]
    key = _NUMBERS.sub("#", line)
    if key not in seen:
        seen.add(key)
        kept.append(line)
