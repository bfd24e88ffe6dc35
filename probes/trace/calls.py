"""Records of the traced ranks read back as the doctor's types: a call site as a Site, a
wrapper's collective record and a flight-recorder entry as a CollectiveCall."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ddp_doctor.facts.collectives import COMPLETED, PENDING, CollectiveCall
from ddp_doctor.facts.trace import Site
from ddp_doctor.patient.collectives import dtype_name, recorded_ops
from ddp_doctor.readings.flight_recorder_entries import entry_call


def site_of(value: Any, cwd: str | None = None) -> Site | None:
    if not isinstance(value, (list, tuple)) or len(value) < 2 or not isinstance(value[1], int):
        return None
    path = str(value[0])
    # Shown relative to the run's folder, except installed code: a virtualenv inside the
    # project must still be recognised as torch's, not the user's, by its absolute path.
    if cwd and os.path.isabs(path) and not _installed(path):
        relative = os.path.relpath(path, cwd)
        path = path if relative.startswith("..") else relative
    return Site(path, value[1], str(value[2]) if len(value) > 2 else "")


def _installed(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


def wrapper_call(
    record: Mapping[str, Any], cwd: str | None, state: str = COMPLETED
) -> CollectiveCall:
    site = site_of(record.get("site"), cwd)
    seq = record.get("seq")
    return CollectiveCall(
        seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
        op=str(record.get("op")),
        group=str(record.get("group") or "0"),
        shapes=_shapes(record.get("shapes")),
        dtypes=tuple(dtype_name(str(d)) for d in record.get("dtypes") or ()),
        state=state,
        where=str(site) if site else None,
    )


def flight_recorder_calls(entries: Any, waiting: bool = False) -> tuple[CollectiveCall, ...]:
    """Entries -> calls (point-to-point ones left out); when the rank is waiting, its last
    unfinished entry is the pending one, and every other is taken as done (gloo marks finished
    entries retired, but leaves every entry "scheduled")."""
    calls = [
        call
        for call in (
            entry_call(e)
            for e in (entries if isinstance(entries, list) else [])
            if isinstance(e, dict)
        )
        if not call.point_to_point
    ]
    last_open = max((i for i, c in enumerate(calls) if c.state == PENDING), default=None)
    return tuple(
        replace(call, state=PENDING if waiting and i == last_open else COMPLETED)
        for i, call in enumerate(calls)
    )


def numbered_as_recorded(
    pending: CollectiveCall, recorded: Sequence[CollectiveCall]
) -> CollectiveCall:
    """The wrapped call a rank waits in, numbered as the flight recorder numbers it (the
    wrappers count only the script's own calls; DDP's all-reduces never pass them): the
    recorder's pending entry of the same group, where it is one the call runs as."""
    entry = next((c for c in reversed(recorded) if c.state == PENDING), None)
    if entry is None or entry.group != pending.group or entry.op not in recorded_ops(pending.op):
        return pending
    return replace(pending, seq=entry.seq)


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    shapes = []
    for shape in value if isinstance(value, list) else []:
        if isinstance(shape, list) and all(isinstance(n, int) for n in shape):
            shapes.append(tuple(shape))
    return tuple(shapes)
