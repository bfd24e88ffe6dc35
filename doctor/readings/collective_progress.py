"""Collective progress across ranks: one pure function over each rank's ordered collectives,
used by `trace` (its wrappers' and flight recorder's records) and by `logs` (flight-recorder
dumps), so one hang gets one verdict and one collective number everywhere.

Per process group, the ranks' collectives are lined up by sequence number (the flight
recorder's collective_seq_id). Two answers per group:
- mismatches: sequence numbers where ranks called different ops, or the same op with inputs
  that must agree (patient/collectives.py says which) but do not;
- the stall: the first collective that some rank waits in or that not every rank reached, the
  ranks at it (the odd ones out when ranks wait in different ops), and every other member
  with where it is instead. A rank in the same op with other shapes reached it (that is a
  mismatch); a collective every rank entered at a mismatch is no stall of its own: the
  mismatch is why none finished.
A flight recorder is a ring buffer: a rank whose records start after a sequence number (or skip
it) says nothing about it, so it is never named as missing there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ddp_doctor.facts.collectives import (
    COMPLETED,
    FLIGHT_RECORDER,
    PENDING,
    CollectiveCall,
    RankCollectives,
)
from ddp_doctor.patient.collectives import BY_NAME, OUTPUT

DEFAULT_GROUP = "0"
NOT_COMPLETED, NEVER_REACHED = "not-completed", "never-reached"
# Some ranks still in it, the others through it and none elsewhere: in a dump most often a
# state caught mid-update; a traced run's quiet time says whether it is a hang.
PARTLY_COMPLETED = "partly-completed"


@dataclass(frozen=True)
class Mismatch:
    group: str
    seq: int
    calls: Mapping[int, CollectiveCall]  # rank -> what it called at this sequence number
    differs: tuple[str, ...]  # "op", or "input sizes" and/or "dtypes"


@dataclass(frozen=True)
class Position:
    """Where a member of the group is instead of in the stalled collective."""

    at: CollectiveCall | None  # its own, different call at that sequence number
    pending: CollectiveCall | None  # the call it waits in (any group), if any
    last: CollectiveCall | None  # its last collective in the group before it


@dataclass(frozen=True)
class Stall:
    group: str
    seq: int
    call: CollectiveCall  # what the ranks at it called
    waiting: tuple[int, ...]  # the ranks at it (pending in it, or past it alone)
    elsewhere: Mapping[int, Position]  # every other member that did not get through it
    through: tuple[int, ...]  # members that finished the same call there
    # never-reached (some member is elsewhere), not-completed (all are in it, none finished), or
    # partly-completed (the others finished it)
    kind: str


@dataclass(frozen=True)
class GroupProgress:
    group: str
    group_desc: str
    ranks: tuple[int, ...]  # members with records
    missing: tuple[int, ...]  # members without any record (no dump)
    window_start: int  # the first sequence number every rank's records still hold
    compared: int  # sequence numbers held by two ranks or more
    mismatches: tuple[Mismatch, ...]
    stall: Stall | None


@dataclass(frozen=True)
class CollectiveProgress:
    ranks: tuple[int, ...]
    groups: tuple[GroupProgress, ...]

    @property
    def mismatches(self) -> list[Mismatch]:
        return [m for group in self.groups for m in group.mismatches]

    @property
    def stalls(self) -> list[Stall]:
        return [group.stall for group in self.groups if group.stall is not None]

    def group(self, name: str) -> GroupProgress | None:
        return next((g for g in self.groups if g.group == name), None)


def collective_progress(records: Sequence[RankCollectives]) -> CollectiveProgress:
    """The entry point: per-rank records in, per-group mismatches and stall out. Every call is
    looked at a bounded number of times, so time grows with the records, not with groups x
    records."""
    by_rank = {record.rank: record for record in records}
    lines, descs = _timelines(by_rank.values())
    waiting = {rank: first_pending(record.calls) for rank, record in by_rank.items()}
    order = sorted(lines, key=lambda name: (name != DEFAULT_GROUP, name))
    groups = [_group(name, descs[name], lines[name], by_rank, waiting) for name in order]
    return CollectiveProgress(tuple(sorted(by_rank)), tuple(groups))


def signature(call: CollectiveCall) -> tuple[object, ...]:
    """What must be equal on every rank at one sequence number."""
    collective = BY_NAME.get(call.op)
    if collective is None or not collective.agree:
        return (call.op,)
    if call.source != FLIGHT_RECORDER:
        return (call.op, call.shapes, call.dtypes)
    if collective.recorded_sizes is None:
        return (call.op,)
    if collective.recorded_sizes == OUTPUT:
        return (call.op, call.output_shapes, call.output_dtypes)
    return (call.op, call.shapes, call.dtypes)


def first_pending(calls: Sequence[CollectiveCall]) -> CollectiveCall | None:
    return next((call for call in calls if call.state == PENDING), None)


Lines = dict[int, dict[int, CollectiveCall]]  # rank -> sequence number -> its call


def _timelines(records: Iterable[RankCollectives]) -> tuple[dict[str, Lines], dict[str, str]]:
    """Per process group, each rank's collectives by sequence number (point-to-point ones
    are numbered apart and left out), and the group's description where a record names it."""
    lines: dict[str, Lines] = {}
    descs: dict[str, str] = {}
    for record in records:
        for call in record.calls:
            if call.point_to_point or call.seq < 0:
                continue
            lines.setdefault(call.group, {}).setdefault(record.rank, {}).setdefault(call.seq, call)
            if not descs.get(call.group):
                descs[call.group] = call.group_desc
    return lines, descs


def _members(
    group: str, desc: str, recorded: Iterable[int], by_rank: Mapping[int, RankCollectives]
) -> list[int]:
    """The group's ranks as the records list them (pg_config); the default group holds every
    rank; other groups at least the ranks that recorded a collective in them."""
    listed = {r for rec in by_rank.values() for r in rec.group_ranks.get(group, ())}
    if group == DEFAULT_GROUP or desc == "default_pg":
        everyone = {
            r for rec in by_rank.values() for ranks in rec.group_ranks.values() for r in ranks
        }
        return sorted(listed | set(recorded) | everyone | set(by_rank))
    return sorted(listed | set(recorded))


def _group(
    name: str,
    desc: str,
    recorded: Lines,
    by_rank: Mapping[int, RankCollectives],
    waiting: Mapping[int, CollectiveCall | None],
) -> GroupProgress:
    members = _members(name, desc, recorded, by_rank)
    present = [rank for rank in members if rank in by_rank]
    lines = {rank: recorded.get(rank, {}) for rank in present}
    held = [min(line) for line in lines.values() if line]
    points = _points(lines)
    mismatches = tuple(m for seq, calls in points if (m := _mismatch(name, seq, calls)))
    stall = _stall(name, lines, waiting)
    if (
        stall is not None
        and stall.kind != NEVER_REACHED
        and stall.seq in {m.seq for m in mismatches}
    ):
        stall = None  # every rank entered it, with other shapes: the mismatch is the finding
    return GroupProgress(
        group=name,
        group_desc=desc,
        ranks=tuple(present),
        missing=tuple(rank for rank in members if rank not in by_rank),
        window_start=max(held, default=0),
        compared=len(points),
        mismatches=mismatches,
        stall=stall,
    )


def _points(
    lines: Mapping[int, Mapping[int, CollectiveCall]],
) -> list[tuple[int, dict[int, CollectiveCall]]]:
    seqs = sorted({seq for line in lines.values() for seq in line})
    found = []
    for seq in seqs:
        calls = {rank: line[seq] for rank, line in sorted(lines.items()) if seq in line}
        if len(calls) > 1:
            found.append((seq, calls))
    return found


def _mismatch(group: str, seq: int, calls: Mapping[int, CollectiveCall]) -> Mismatch | None:
    if len({signature(call) for call in calls.values()}) < 2:
        return None
    if len({call.op for call in calls.values()}) > 1:
        differs: tuple[str, ...] = ("op",)
    else:
        parts = [s[1:] for s in map(signature, calls.values())]
        sizes = "output sizes" if _compares_outputs(next(iter(calls.values()))) else "input sizes"
        differs = tuple(
            what
            for what, index in ((sizes, 0), ("dtypes", 1))
            if len({part[index] for part in parts}) > 1
        )
    return Mismatch(group, seq, dict(calls), differs or ("output sizes",))


def _compares_outputs(call: CollectiveCall) -> bool:
    collective = BY_NAME.get(call.op)
    return (
        call.source == FLIGHT_RECORDER
        and collective is not None
        and collective.recorded_sizes == OUTPUT
    )


def _stall(
    group: str,
    lines: Mapping[int, Mapping[int, CollectiveCall]],
    waiting: Mapping[int, CollectiveCall | None],
) -> Stall | None:
    point = _stall_point(lines)
    if point is None:
        return None
    entered = {rank: line[point] for rank, line in lines.items() if point in line}
    pending = {rank: call for rank, call in entered.items() if call.state == PENDING}
    if len({call.op for call in entered.values()}) > 1:
        # ranks in different ops at one point (a collective under a rank guard): judged by the
        # ops alone, since a backend's states for such calls depend on when the dump was
        # taken (gloo may mark either side finished)
        chosen = _odd_ones_out(entered)
    else:
        chosen = _odd_ones_out(pending or entered)  # by op: other shapes still reached it
    call = entered[chosen[0]]
    elsewhere, through = {}, []
    for rank, line in lines.items():
        if rank in chosen:
            continue
        if _got_through(line, point, call):
            through.append(rank)
            continue
        if point not in line and line and max(line) > point:
            continue  # before its ring buffer's window, or a gap: no evidence it is missing
        before = max((seq for seq in line if seq < point), default=None)
        last = line[before] if before is not None else None
        elsewhere[rank] = Position(line.get(point), waiting.get(rank), last)
    kind = NEVER_REACHED if elsewhere else PARTLY_COMPLETED if through else NOT_COMPLETED
    return Stall(group, point, call, chosen, elsewhere, tuple(through), kind)


def _stall_point(lines: Mapping[int, Mapping[int, CollectiveCall]]) -> int | None:
    """The earliest sequence number some rank waits in, or that some rank holding records
    reached while another never did."""
    candidates = [
        call.seq for line in lines.values() for call in line.values() if call.state == PENDING
    ]
    if lines:
        common_end = min((max(line) if line else -1) for line in lines.values())
        later = [seq for line in lines.values() for seq in line if seq > common_end]
        if later:
            candidates.append(min(later))
    return min(candidates) if candidates else None


def _odd_ones_out(calls: Mapping[int, CollectiveCall]) -> tuple[int, ...]:
    """Of the ranks at one point, those in the op the fewest of them called (a collective under
    a rank guard), ties to the lowest rank."""
    sides: dict[str, list[int]] = {}
    for rank, call in sorted(calls.items()):
        sides.setdefault(call.op, []).append(rank)
    return tuple(min(sides.values(), key=lambda ranks: (len(ranks), ranks[0])))


def _got_through(line: Mapping[int, CollectiveCall], seq: int, wanted: CollectiveCall) -> bool:
    call = line.get(seq)
    return call is not None and call.state == COMPLETED and call.op == wanted.op
