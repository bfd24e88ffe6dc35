"""Where the ranks' flight records part: per process group, line the ranks' collectives up by
sequence id and find the first that not every rank entered, or that ranks entered with
different ops, shapes or dtypes.

A record is a ring buffer (TORCH_FR_BUFFER_SIZE entries), so ranks are compared only over the
sequence ids every rank still holds. Point-to-point ops count separately (p2p_seq_id) and are
left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ddp_doctor.flightrec.dumps import Entry, RankDump

# Ops whose tensors have the same shape on every rank in correct code; others (all_to_all,
# scatter, gather, the v-variants) may differ legitimately.
SAME_SHAPE_OPS = frozenset(
    {
        "all_reduce", "allreduce", "broadcast", "reduce", "barrier", "all_gather",
        "allgather", "_allgather_base", "all_gather_into_tensor", "allgather_into_tensor_coalesced",
        "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "coalesced",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Side:
    """What some ranks did at one sequence id."""

    ranks: tuple[int, ...]
    entry: Entry | None  # None: these ranks never reached it
    last: Entry | None = None  # for ranks that never reached it: their last collective


@dataclass(frozen=True)
class Divergence:
    kind: str  # "never-reached", "mismatch", "not-completed"
    group: str
    group_desc: str
    seq: int
    sides: tuple[Side, ...]
    differs: tuple[str, ...] = ()  # for a mismatch: "op", "input sizes", "dtypes"


@dataclass
class Comparison:
    ranks: list[int]
    groups: int = 0
    collectives: int = 0  # sequence ids compared, all groups
    divergences: list[Divergence] = field(default_factory=list)
    missing_ranks: dict[str, list[int]] = field(default_factory=dict)  # group -> no dump


def compare(dumps: list[RankDump]) -> Comparison:
    by_rank = {dump.rank: dump for dump in dumps if dump.rank is not None}
    comparison = Comparison(ranks=sorted(by_rank))
    for group, desc in _groups(by_rank.values()):
        members = _members(group, desc, by_rank)
        present = [rank for rank in members if rank in by_rank]
        if missing := [rank for rank in members if rank not in by_rank]:
            comparison.missing_ranks[group] = missing
        timelines = {rank: _timeline(by_rank[rank], group) for rank in present}
        comparison.groups += 1
        found = _first_divergence(group, desc, timelines, comparison)
        if found is not None:
            comparison.divergences.append(found)
    return comparison


def _groups(dumps: Iterable[RankDump]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for dump in dumps:
        for entry in dump.entries:
            if not entry.is_p2p and entry.seq >= 0:
                seen.setdefault(entry.group, entry.group_desc)
    return sorted(seen.items())


def _members(group: str, desc: str, by_rank: Mapping[int, RankDump]) -> list[int]:
    """The group's ranks as pg_config lists them; the default group holds every rank."""
    for dump in by_rank.values():
        if group in dump.group_ranks:
            return sorted(set(dump.group_ranks[group]) | set(_ranks_with(group, by_rank)))
    if desc == "default_pg" or group == "0":
        listed = {r for d in by_rank.values() for ranks in d.group_ranks.values() for r in ranks}
        return sorted(listed | set(by_rank))
    return _ranks_with(group, by_rank)


def _ranks_with(group: str, by_rank: Mapping[int, RankDump]) -> list[int]:
    return sorted(r for r, d in by_rank.items() if any(e.group == group for e in d.entries))


def _timeline(dump: RankDump, group: str) -> dict[int, Entry]:
    return {e.seq: e for e in dump.entries if e.group == group and not e.is_p2p and e.seq >= 0}


def _first_divergence(
    group: str, desc: str, timelines: dict[int, dict[int, Entry]], comparison: Comparison
) -> Divergence | None:
    if not timelines:
        return None
    last = {rank: max(line, default=0) for rank, line in timelines.items()}
    window_start = max((min(line) for line in timelines.values() if line), default=0)
    common_end = min(last.values())
    for seq in _present(timelines, window_start, common_end):  # never range(): ids are input
        entries = {rank: line[seq] for rank, line in timelines.items() if seq in line}
        if len(entries) < len(timelines):
            continue  # a gap in some rank's buffer: nothing to compare
        comparison.collectives += 1
        mismatch = _mismatch(group, desc, seq, entries)
        if mismatch is not None:
            return mismatch
    if common_end < max(last.values()):
        return _never_reached(group, desc, common_end + 1, timelines, last)
    return _not_completed(group, desc, common_end, timelines)


def _present(timelines: dict[int, dict[int, Entry]], low: int, high: int) -> list[int]:
    """The sequence ids some rank recorded between low and high, in order: as many as the
    entries present, however far apart they are (ids 0 and 10^15 are two, not 10^15)."""
    return sorted({seq for line in timelines.values() for seq in line if low <= seq <= high})


def _mismatch(group: str, desc: str, seq: int, entries: dict[int, Entry]) -> Divergence | None:
    shapes = {rank: _signature(entry) for rank, entry in entries.items()}
    if len(set(shapes.values())) < 2:
        return None
    differs = []
    if len({entry.op for entry in entries.values()}) > 1:
        differs.append("op")
    else:
        if len({e.input_sizes for e in entries.values()}) > 1:
            differs.append("input sizes")
        if len({e.input_dtypes for e in entries.values()}) > 1:
            differs.append("dtypes")
    differs = differs or ["output sizes"]
    sides = _sides(entries, key=_signature)
    return Divergence("mismatch", group, desc, seq, sides, tuple(differs))


def _signature(entry: Entry) -> tuple[object, ...]:
    if entry.op not in SAME_SHAPE_OPS:
        return (entry.op,)
    return (entry.op, entry.input_sizes, entry.input_dtypes, entry.output_sizes)


def _never_reached(
    group: str, desc: str, seq: int, timelines: dict[int, dict[int, Entry]], last: dict[int, int]
) -> Divergence:
    entered = {rank: line[seq] for rank, line in timelines.items() if seq in line}
    behind = sorted(rank for rank in timelines if last[rank] < seq)
    sides = list(_sides(entered, key=_signature))
    by_last: dict[int, list[int]] = {}
    for rank in behind:
        by_last.setdefault(last[rank], []).append(rank)
    for their_last, ranks in sorted(by_last.items()):
        sides.append(Side(tuple(ranks), None, timelines[ranks[0]].get(their_last)))
    return Divergence("never-reached", group, desc, seq, tuple(sides))


def _not_completed(
    group: str, desc: str, seq: int, timelines: dict[int, dict[int, Entry]]
) -> Divergence | None:
    """Every rank entered the group's last collective and none saw it finish (with one dump:
    that rank was still inside it when it dumped)."""
    entries = {rank: line[seq] for rank, line in timelines.items() if seq in line}
    if not entries or any(entry.completed for entry in entries.values()):
        return None
    return Divergence("not-completed", group, desc, seq, _sides(entries, key=_signature))


def _sides(entries: Mapping[int, Entry], key: Callable[[Entry], object]) -> tuple[Side, ...]:
    groups: dict[object, list[int]] = {}
    for rank, entry in sorted(entries.items()):
        groups.setdefault(key(entry), []).append(rank)
    return tuple(Side(tuple(ranks), entries[ranks[0]]) for ranks in groups.values())
