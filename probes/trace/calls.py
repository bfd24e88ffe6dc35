"""Records of the traced ranks read back as the doctor's types: a call site as a Site, a
wrapper's collective record and a flight-recorder entry as a CollectiveCall."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ddp_doctor.facts.trace import Site
from ddp_doctor.trace.collectives import (
    COMPLETED,
    PENDING,
    CollectiveCall,
    normalise_dtype,
    normalise_op,
)


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
    return CollectiveCall(
        seq=int(record.get("seq") or 0),
        op=str(record.get("op")),
        group=str(record.get("group") or "0"),
        shapes=_shapes(record.get("shapes")),
        dtypes=tuple(str(d) for d in record.get("dtypes") or ()),
        state=state,
        where=str(site) if site else None,
    )


def flight_recorder_calls(entries: Any, waiting: bool = False) -> tuple[CollectiveCall, ...]:
    """Entries -> calls; when the rank is waiting, its last unretired entry is the pending
    one (gloo marks completed entries retired, but every entry "scheduled")."""
    calls = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        group = entry.get("process_group") or ["0"]
        calls.append(
            CollectiveCall(
                seq=int(entry.get("collective_seq_id") or 0),
                op=normalise_op(str(entry.get("profiling_name") or "?")),
                group=str(group[0] if isinstance(group, list) and group else group),
                shapes=_shapes(entry.get("input_sizes")),
                dtypes=tuple(normalise_dtype(str(d)) for d in entry.get("input_dtypes") or ()),
                state="retired" if entry.get("retired") else "unretired",
            )
        )
    last_open = max((i for i, c in enumerate(calls) if c.state == "unretired"), default=None)
    return tuple(
        _with_state(call, PENDING if waiting and i == last_open else COMPLETED)
        for i, call in enumerate(calls)
    )


def _with_state(call: CollectiveCall, state: str) -> CollectiveCall:
    return replace(call, state=state)


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    shapes = []
    for shape in value if isinstance(value, list) else []:
        if isinstance(shape, list) and all(isinstance(n, int) for n in shape):
            shapes.append(tuple(shape))
    return tuple(shapes)
