"""One entry of torch's flight recorder read as a CollectiveCall: the one parser for the entries
a traced rank's monitor hands back and for those in a dump given to `logs`.

Keys as torch 2.13 writes them (version "2.10"): collective_seq_id (older dumps: seq_id),
p2p_seq_id, profiling_name ("nccl:all_reduce", "gloo:broadcast"), process_group [name, desc],
input_sizes, input_dtypes, output_sizes, output_dtypes (c10 names: "Float"), state
("scheduled", "started", "completed"), retired, is_p2p, timeout_ms, frames (pickles only).
Gloo leaves every entry "scheduled" and marks the finished ones retired. Odd values are
skipped, never raised: a dump is evidence, read as far as it goes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath

from ddp_doctor.facts.collectives import COMPLETED, FLIGHT_RECORDER, PENDING, CollectiveCall
from ddp_doctor.patient.collectives import dtype_name, op_name, recorded

_TORCH_FRAME = re.compile(r"[/\\]torch[/\\](?:distributed|nn|_dynamo|utils)[/\\]")
_NOT_CALLERS = ("c10d_logger", "ddp_doctor_patient")  # torch's logging wrapper, trace's own


def entry_call(raw: Mapping[str, object]) -> CollectiveCall:
    name = str(raw.get("profiling_name") or "")
    backend, collective = recorded(name)
    group_name, group_desc = _group(raw)
    seq = raw.get("collective_seq_id", raw.get("seq_id", -1))
    finished = raw.get("state") == "completed" or raw.get("retired") is True
    timeout = raw.get("timeout_ms")
    return CollectiveCall(
        seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else -1,
        op=op_name(name) if name else "?",
        group=group_name,
        shapes=_sizes(raw.get("input_sizes")),
        dtypes=_dtypes(raw.get("input_dtypes")),
        state=COMPLETED if finished else PENDING,
        where=_caller(raw.get("frames")),
        source=FLIGHT_RECORDER,
        group_desc=group_desc,
        backend=backend,
        output_shapes=_sizes(raw.get("output_sizes")),
        output_dtypes=_dtypes(raw.get("output_dtypes")),
        point_to_point=raw.get("is_p2p") is True
        or (collective is not None and collective.point_to_point),
        timeout_ms=timeout if isinstance(timeout, int) and not isinstance(timeout, bool) else None,
    )


def _group(raw: Mapping[str, object]) -> tuple[str, str]:
    group = raw.get("process_group")
    if isinstance(group, (list, tuple)) and len(group) == 2:
        return str(group[0]), str(group[1])
    if isinstance(group, (list, tuple)) and group:
        return str(group[0]), ""
    if isinstance(group, str) and group:
        return group, ""
    return str(raw.get("pg_id", "0")), ""


def _sizes(value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(
        tuple(n for n in shape if isinstance(n, int) and not isinstance(n, bool))
        for shape in value
        if isinstance(shape, (list, tuple))
    )


def _dtypes(value: object) -> tuple[str, ...]:
    return tuple(dtype_name(str(v)) for v in value) if isinstance(value, (list, tuple)) else ()


def _caller(frames: object) -> str | None:
    """The innermost frame of the user's code: where this rank called the collective."""
    if not isinstance(frames, (list, tuple)):
        return None
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        filename = str(frame.get("filename", ""))
        if filename and not _TORCH_FRAME.search(filename) and not _not_caller(filename):
            return f"{PurePath(filename.replace(chr(92), '/')).name}:{frame.get('line', '?')}"
    return None


def _not_caller(filename: str) -> bool:
    return any(part in filename for part in _NOT_CALLERS)
