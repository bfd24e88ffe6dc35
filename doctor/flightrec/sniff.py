"""Whether a file's first bytes are a flight-recorder dump: standard library only, so `logs`
can ask it of any file without loading the dump reader."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.inputs import open_regular

SNIFF_BYTES = 4096


def looks_like_dump(head: bytes) -> bool:
    """A pickle (protocol 2+), or JSON whose start mentions the dump's keys."""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return True
    text = head.lstrip()[:SNIFF_BYTES]
    return text.startswith(b"{") and (b'"entries"' in text or b'"pg_config"' in text)


def is_dump_file(path: Path) -> bool:
    """Raises OSError when the file cannot be read."""
    with open_regular(path) as stream:
        return looks_like_dump(stream.read(SNIFF_BYTES))
