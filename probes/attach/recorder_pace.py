"""How fast a rank's collectives went lately, from a flight-recorder dump written during this
attach (asked for through the job's own pipe): the sequence numbers (collective_seq_id) and
creation times (time_created_ns) of the last entries of one process group, the default group
where it has entries. Only a fresh dump is read for it, so the pace is the job's now, not an
old dump's. The dump is read as plain data (JSON, or a pickle without running it), bounded as
the one dump reader bounds it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ddp_doctor.facts.attach import RecorderPace
from ddp_doctor.flightrec.dumps import MAX_DUMP_BYTES
from ddp_doctor.flightrec.safe_pickle import load_plain
from ddp_doctor.inputs import TooLarge, read_capped

LAST_ENTRIES = 64
DEFAULT_GROUP = "0"


def recent_pace(path: Path | None) -> RecorderPace | None:
    """None where the dump cannot be read or holds fewer than two timed entries of a group."""
    document = _document(path)
    entries = document.get("entries") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return None
    points = [p for p in map(_point, entries[-4 * LAST_ENTRIES :]) if p is not None]
    if not points:
        return None
    group = DEFAULT_GROUP if any(g == DEFAULT_GROUP for g, _, _ in points) else points[-1][0]
    mine = [(seq, created) for g, seq, created in points if g == group][-LAST_ENTRIES:]
    if len(mine) < 2 or mine[-1][0] <= mine[0][0] or mine[-1][1] <= mine[0][1]:
        return None
    span = round((mine[-1][1] - mine[0][1]) / 1e9, 3)
    return RecorderPace(group, mine[-1][0] - mine[0][0], span) if span > 0 else None


def _document(path: Path | None) -> object:
    if path is None:
        return None
    try:
        data = read_capped(path, MAX_DUMP_BYTES)
    except (TooLarge, OSError):
        return None
    try:
        return load_plain(data) if data[:1] == b"\x80" else json.loads(data)
    except (ValueError, RecursionError):  # bad JSON or UTF-8; a pickle refused or broken
        return None


def _point(raw: object) -> tuple[str, int, int] | None:
    if not isinstance(raw, Mapping) or raw.get("is_p2p") is True:
        return None
    seq = raw.get("collective_seq_id", raw.get("seq_id"))
    created = raw.get("time_created_ns")
    if not (_whole(seq) and _whole(created)):
        return None
    group = raw.get("process_group")
    name = str(group[0]) if isinstance(group, (list, tuple)) and group else DEFAULT_GROUP
    return name, int(seq), int(created)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
