"""What the traced ranks' collectives say: a hang (DDP302, or DDP202 when ranks wait in
init_process_group), mismatched collectives (DDP304), and a collective under a rank guard
that the hang confirms (DDP120). The analysis itself is the one `logs` runs on flight-recorder
dumps (ddp_doctor.readings.collective_progress); `check`'s part was run when the trace ran
(TraceFacts.rank_guard_checks): this reads facts only."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from ddp_doctor.facts.collectives import PENDING, CollectiveCall, RankCollectives
from ddp_doctor.facts.trace import RankSnapshot, RankTrace, TraceFacts
from ddp_doctor.model import Location, Remediation
from ddp_doctor.readings.collective_progress import (
    Mismatch,
    Position,
    Stall,
    collective_progress,
)
from ddp_doctor.registry import Hit
from ddp_doctor.rules.jobreading import rank_list

SEEN = "at runtime"
MIN_QUIET_S = 10.0
INIT = "init_process_group"
# The job's DDP302 fix is about the machine (P2P, ACS); a traced hang is the script's.
STALL_FIX = Remediation(
    "Make every rank call the same collectives in the same order: the ranks that never reached "
    "it took another path (a rank guard, an early return or break, fewer batches than the "
    "others). If a rank was only slow (a long evaluation or checkpoint on rank 0), raise "
    "--hang-after, or let the other ranks do their share of that work."
)
INIT_FIX = Remediation(
    "Every rank must reach init_process_group: the rank named is still at the line shown "
    "(loading data, waiting for a file or a lock). Move slow per-rank work after the init, or "
    "give init_process_group a timeout= long enough for it."
)


def collective_hits(trace: TraceFacts) -> Iterator[tuple[str, Hit]]:
    calls = call_lists(trace)
    snapshots = {s.rank: s for s in trace.forensics.ranks} if trace.forensics else {}
    progress = collective_progress([RankCollectives(r, c) for r, c in calls.items()])
    for group in progress.groups:
        if group.mismatches:
            yield "DDP304", _mismatch_hit(group.mismatches[0], snapshots, len(group.mismatches))
    if not snapshots or not _quiet_long_enough(trace):
        return
    for stall in progress.stalls:
        if stall.call.state != PENDING:
            continue  # no rank waits in it: the ranks compute, whatever their counts
        if stall.call.op == INIT:
            yield "DDP202", replace(_stall_hit(stall, snapshots, trace), fix=INIT_FIX)
        else:
            yield "DDP302", replace(_stall_hit(stall, snapshots, trace), fix=STALL_FIX)
        guarded = _rank_guard_line(stall, snapshots, trace)
        if guarded is not None:
            yield "DDP120", guarded


def _quiet_long_enough(trace: TraceFacts) -> bool:
    """Forensics at the time limit catch a working job too, some rank inside a collective at
    that instant: a hang needs the ranks to have been quiet for a while as well."""
    forensics = trace.forensics
    if forensics is None or forensics.reason == "hang":
        return forensics is not None
    return forensics.quiet_s >= min(trace.hang_after_s or MIN_QUIET_S, MIN_QUIET_S)


def call_lists(trace: TraceFacts) -> dict[int, tuple[CollectiveCall, ...]]:
    """rank -> its collectives in order: the flight recorder's when every rank has them (they
    include DDP's own), else the monitor's wrappers; the call a rank waits in marked pending."""
    snapshots = {s.rank: s for s in trace.forensics.ranks} if trace.forensics else {}
    ranks = [r for r in trace.ranks if r.init is not None or r.collectives_first]
    recorded = {r.rank: _flight_recorder(r, snapshots.get(r.rank)) for r in ranks}
    initialising = any(s.pending and s.pending.op == INIT for s in snapshots.values())
    if recorded and all(recorded.values()) and not initialising:
        return recorded
    return {r.rank: _wrapper_calls(r, snapshots.get(r.rank)) for r in trace.ranks}


def _flight_recorder(rank: RankTrace, snapshot: RankSnapshot | None) -> tuple[CollectiveCall, ...]:
    if snapshot is not None and snapshot.flight_recorder:
        return snapshot.flight_recorder
    return rank.flight_recorder_last or rank.flight_recorder_first


def _wrapper_calls(rank: RankTrace, snapshot: RankSnapshot | None) -> tuple[CollectiveCall, ...]:
    calls = list(rank.collectives_first + rank.collectives_last)
    pending = snapshot.pending if snapshot is not None and snapshot.waiting else None
    if pending is None:
        return tuple(calls)
    if pending.op == INIT:
        return (pending,)
    # The call a rank waits in is the last its wrappers wrote; the snapshot may number it as
    # the flight recorder does, so it is matched by what it is, and keeps the wrappers' count.
    if calls and _same_call(calls[-1], pending):
        return (*calls[:-1], replace(calls[-1], state=PENDING))
    return (*calls, pending)


def _same_call(recorded: CollectiveCall, pending: CollectiveCall) -> bool:
    return (recorded.op, recorded.group, recorded.where) == (
        pending.op,
        pending.group,
        pending.where,
    )


def _mismatch_hit(mismatch: Mismatch, snapshots: Mapping[int, RankSnapshot], count: int) -> Hit:
    parts = []
    for rank, call in mismatch.calls.items():
        where = _where_of(rank, call, snapshots)
        parts.append(f"rank {rank} {call.describe()}" + (f" at {where}" if where else ""))
    more = f" ({count - 1} more mismatch{'es' if count > 2 else ''} after it)" if count > 1 else ""
    first = next(iter(mismatch.calls.items()))
    where = _where_of(first[0], first[1], snapshots)
    return Hit(
        f"seen at runtime: collective {mismatch.seq} of {_group(mismatch.group)} differs "
        f"between ranks: {'; '.join(parts)}{more}",
        {
            "seen": SEEN,
            "group": mismatch.group,
            "seq": mismatch.seq,
            "calls": {str(r): c.describe() for r, c in mismatch.calls.items()},
        },
        location=_location(where),
    )


def _stall_hit(stall: Stall, snapshots: Mapping[int, RankSnapshot], trace: TraceFacts) -> Hit:
    first = stall.waiting[0]
    where = _where_of(first, stall.call, snapshots)
    waiting = f"rank{'s' if len(stall.waiting) > 1 else ''} {rank_list(stall.waiting)}"
    what = stall.call.op if stall.call.op == INIT else stall.call.describe()
    number = (
        ""
        if stall.call.op == INIT
        else f" (collective {stall.call.seq} of {_group(stall.call.group)})"
    )
    message = (
        f"seen at runtime: {waiting} wait{'' if len(stall.waiting) > 1 else 's'} in {what}{number}"
    )
    message += f" at {where}" if where else ""
    others = []
    for rank, position in stall.elsewhere.items():
        others.append(f"rank {rank} never reached it: {_elsewhere(rank, position, snapshots)}")
    if others:
        message += "; " + "; ".join(others)
    forensics = trace.forensics
    if forensics is not None:
        how = "the time limit" if forensics.reason == "timeout" else "--hang-after"
        message += f" (no progress for {forensics.quiet_s:.0f} s; stopped at {how})"
    return Hit(
        message,
        {
            "seen": SEEN,
            "collective": stall.call.op,
            "seq": stall.call.seq,
            "group": stall.call.group,
            "waiting_ranks": list(stall.waiting),
            "ranks_elsewhere": {
                str(r): _elsewhere(r, p, snapshots) for r, p in stall.elsewhere.items()
            },
        },
        location=_location(where),
    )


def _elsewhere(rank: int, position: Position, snapshots: Mapping[int, RankSnapshot]) -> str:
    pending = position.pending
    snapshot = snapshots.get(rank)
    if snapshot is None or snapshot.exited:
        return "it had already exited"
    at = f" at {snapshot.where}" if snapshot.where else ""
    if pending is not None:
        return f"it waits in {pending.describe()} (collective {pending.seq}){at}"
    if snapshot.where is not None:
        function = f" (in {snapshot.where.function})" if snapshot.where.function else ""
        return f"it is at {snapshot.where}{function}"
    return "its stack could not be read"


def _where_of(rank: int, call: CollectiveCall, snapshots: Mapping[int, RankSnapshot]) -> str | None:
    if call.where:
        return call.where
    snapshot = snapshots.get(rank)
    if snapshot is not None and snapshot.where is not None and call.state == PENDING:
        return str(snapshot.where)
    return None


def _location(where: str | None) -> Location | None:
    if not where or ":" not in where:
        return None
    path, _, line = where.rpartition(":")
    return Location(path, int(line)) if line.isdigit() else None


def _group(name: str) -> str:
    return "the default group" if name == "0" else f"group {name}"


def _rank_guard_line(
    stall: Stall, snapshots: Mapping[int, RankSnapshot], trace: TraceFacts
) -> Hit | None:
    """DDP120 when `check` (run when the trace ran) also finds the call the odd ranks wait in
    under a rank guard."""
    where = _where_of(stall.waiting[0], stall.call, snapshots)
    location = _location(where)
    if location is None or not stall.elsewhere or not _statically_guarded(location, trace):
        return None
    return Hit(
        f"seen at runtime: {stall.call.op} at {where} runs under a rank guard: rank(s) "
        f"{rank_list(stall.waiting)} wait in it, rank(s) {rank_list(stall.elsewhere)} never call it",
        {"seen": SEEN, "waiting_ranks": list(stall.waiting), "other_ranks": list(stall.elsewhere)},
        location=location,
    )


def _statically_guarded(location: Location, trace: TraceFacts) -> bool:
    return any(
        check.path == location.path and location.line in check.lines
        for check in trace.rank_guard_checks
    )
