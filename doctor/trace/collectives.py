"""Collective progress across ranks, as a pure function of each rank's ordered collectives.

The records come from torch's flight recorder (the trace's ranks, or a dump file) or from the
trace monitor's own wrappers; either way they are normalised to CollectiveCall first. Two
questions are answered: where do ranks disagree at one sequence number of a process group
(op, shapes or dtypes: a mismatch), and where is the job stuck (the first collective some
ranks wait in, and which ranks never reached it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

COMPLETED, PENDING = "completed", "pending"
# Inputs that must agree on every rank; all_to_all and the *_object calls may differ.
SAME_INPUT_OPS = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "allreduce",
        "broadcast",
        "reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_single",
        "_allgather_base",
        "allgather",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
        "_reduce_scatter_base",
        "gather",
        "scatter",
    }
)
DTYPE_NAMES = {  # the flight recorder's scalar type names, as torch.dtype prints them
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}


@dataclass(frozen=True)
class CollectiveCall:
    seq: int  # per process group; 0 is init_process_group
    op: str  # all_reduce, barrier ... (a flight recorder's "gloo:" prefix removed)
    group: str = "0"  # the process group's name; "0" is the default group
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    state: str = COMPLETED  # completed, pending, or unknown
    where: str | None = None  # "path:line" of the call, where the record knows it

    @property
    def signature(self) -> tuple[object, ...]:
        if self.op in SAME_INPUT_OPS:
            return (self.op, self.shapes, self.dtypes)
        return (self.op,)

    def describe(self) -> str:
        shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.shapes)
        types = ", ".join(dict.fromkeys(self.dtypes))
        detail = f" [{shapes}] {types}".rstrip() if shapes else ""
        return f"{self.op}{detail}"


@dataclass(frozen=True)
class Mismatch:
    group: str
    seq: int
    calls: Mapping[int, CollectiveCall]  # rank -> what it called at this sequence number


@dataclass(frozen=True)
class Stall:
    """The first collective some ranks wait in, and the ranks that are elsewhere."""

    call: CollectiveCall
    waiting: tuple[int, ...]  # ranks waiting in `call`
    elsewhere: Mapping[int, CollectiveCall | None]  # rank -> its own pending call, or None


def normalise_op(name: str) -> str:
    """'gloo:all_reduce' -> 'all_reduce'; 'nccl:_allgather_base' -> '_allgather_base'."""
    return name.split(":", 1)[-1].strip() or name


def normalise_dtype(name: str) -> str:
    return DTYPE_NAMES.get(name, name.replace("torch.", ""))


def find_mismatches(ranks: Mapping[int, Sequence[CollectiveCall]]) -> list[Mismatch]:
    """Every (group, seq) where two ranks called differently, in order of sequence."""
    by_point: dict[tuple[str, int], dict[int, CollectiveCall]] = {}
    for rank, calls in ranks.items():
        for call in calls:
            by_point.setdefault((call.group, call.seq), {}).setdefault(rank, call)
    found = []
    for (group, seq), calls in sorted(by_point.items(), key=lambda item: (item[0][1], item[0][0])):
        if len({call.signature for call in calls.values()}) > 1:
            found.append(Mismatch(group, seq, dict(sorted(calls.items()))))
    return found


def find_stall(ranks: Mapping[int, Sequence[CollectiveCall]]) -> Stall | None:
    """The earliest pending collective; of the calls pending at that point, the one the
    fewest ranks wait in (the odd one out: a collective under a rank guard), ties to the
    lowest rank. None when no rank is waiting."""
    pending = {rank: _pending(calls) for rank, calls in ranks.items()}
    waiting = {rank: call for rank, call in pending.items() if call is not None}
    if not waiting:
        return None
    earliest = min(waiting.values(), key=lambda call: (call.seq, call.group != "0"))
    point = (earliest.group, earliest.seq)
    at_point = {r: c for r, c in waiting.items() if (c.group, c.seq) == point}
    groups: dict[tuple[object, ...], list[int]] = {}
    for rank, call in sorted(at_point.items()):
        groups.setdefault(call.signature, []).append(rank)
    chosen = min(groups.values(), key=lambda members: (len(members), members[0]))
    call = at_point[chosen[0]]
    elsewhere = {
        rank: pending[rank]
        for rank in sorted(ranks)
        if rank not in chosen and not _passed(ranks[rank], call)
    }
    return Stall(call, tuple(chosen), elsewhere)


def _pending(calls: Sequence[CollectiveCall]) -> CollectiveCall | None:
    return next((call for call in calls if call.state == PENDING), None)


def _passed(calls: Sequence[CollectiveCall], wanted: CollectiveCall) -> bool:
    """The rank completed the same collective at that point (it is not the one missing)."""
    return any(
        call.group == wanted.group
        and call.seq == wanted.seq
        and call.signature == wanted.signature
        and call.state == COMPLETED
        for call in calls
    )
