"""The ranks' journals and torchrun's failure block, read back into job facts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.job import (
    BandwidthRow,
    Identity,
    NodeBandwidth,
    PeerAccess,
    RankFacts,
    StageRecord,
)
from ddp_doctor.patient.journal import read_journal

# torchrun's ChildFailedError block names each failed rank and its exit code:
#   rank      : 1 (local_rank: 1)
#   exitcode  : -9 (pid: 4242)
RANK_EXIT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def torch_exit_codes(output: str) -> dict[int, int]:
    codes: dict[int, int] = {}
    for rank, code in RANK_EXIT.findall(output):
        codes.setdefault(int(rank), int(code))
    return codes


def collect_ranks(
    journals: Path, numbers: list[int], exit_codes: dict[int, int], ended_at: float | None = None
) -> tuple[RankFacts, ...]:
    """`ended_at`: when the job ended (time.time()), to say how long an unfinished stage ran."""
    return tuple(
        rank_facts(
            rank, read_journal(journals / f"rank{rank}.jsonl"), exit_codes.get(rank), ended_at
        )
        for rank in numbers
    )


def rank_facts(
    rank: int, records: list[dict[str, Any]], exit_code: int | None, ended_at: float | None = None
) -> RankFacts:
    placed = next((r for r in records if r.get("event") == "placement"), {})
    node, host = placed.get("group_rank"), placed.get("host")
    return RankFacts(
        rank,
        _stages(records, ended_at),
        exit_code,
        node_rank=node if isinstance(node, int) else None,
        host=host if isinstance(host, str) else None,
    )


def local_rank_numbers(journals: Path, nproc: int, rendezvous: Any = None) -> list[int]:
    """The global ranks this node ran: 0..nproc-1 alone; for a static node, where torchrun
    puts them (node rank x nproc, all nodes alike); plus any journal found (c10d assigns node
    ranks at the rendezvous)."""
    found = {int(p.stem[4:]) for p in journals.glob("rank*.jsonl") if p.stem[4:].isdigit()}
    first = 0
    if rendezvous is not None:
        first = (rendezvous.node_rank or 0) * nproc if rendezvous.node_rank is not None else -1
    expected = set(range(first, first + nproc)) if first >= 0 else set()
    return sorted(found | expected)


def _stages(records: list[dict[str, Any]], ended_at: float | None) -> tuple[StageRecord, ...]:
    stages: dict[str, StageRecord] = {}
    for record in records:
        name = str(record.get("stage"))
        if record.get("event") == "start":
            stages[name] = StageRecord(name, running_s=_running(record.get("time"), ended_at))
        elif record.get("event") == "end":
            stages[name] = StageRecord(
                name,
                ended=True,
                ok=bool(record.get("ok")),
                seconds=record.get("seconds"),
                error=record.get("error"),
                data=record.get("data") or {},
            )
    return tuple(stages.values())


def _running(started: Any, ended_at: float | None) -> float | None:
    if ended_at is None or not isinstance(started, (int, float)):
        return None
    return round(max(0.0, ended_at - started), 3)


def identities_of(ranks: tuple[RankFacts, ...]) -> tuple[Identity, ...]:
    """Rank 0's gathered list when it has one; else what each rank wrote itself."""
    gathered = _stage_data(ranks, 0, "identity").get("identities") or []
    own = [_own_data(r, "identity").get("identity") for r in ranks]
    chosen = gathered if len(gathered) >= len([o for o in own if o]) else own
    return tuple(identity for identity in (_identity(item) for item in chosen) if identity)


def _identity(item: Any) -> Identity | None:
    try:
        return from_jsonable(Identity, item) if item else None
    except CodecError:
        return None


def rows_of(ranks: tuple[RankFacts, ...]) -> tuple[BandwidthRow, ...]:
    return _rows(_stage_data(ranks, 0, "bandwidth").get("rows"))


def inter_node_rows_of(ranks: tuple[RankFacts, ...]) -> tuple[BandwidthRow, ...]:
    """Rank 0's sweep over one rank per node (only with several ranks per node)."""
    return _rows((_stage_data(ranks, 0, "bandwidth").get("inter_node") or {}).get("rows"))


def node_bandwidth_of(ranks: tuple[RankFacts, ...]) -> tuple[NodeBandwidth, ...]:
    """Each node's own sweep, kept by the node's first rank."""
    found = []
    for rank in ranks:
        part = _own_data(rank, "bandwidth").get("intra_node")
        if isinstance(part, dict) and isinstance(part.get("node"), int):
            members = tuple(r for r in part.get("ranks") or () if isinstance(r, int))
            found.append(NodeBandwidth(part["node"], rank.host, members, _rows(part.get("rows"))))
    return tuple(sorted(found, key=lambda node: node.node_rank))


def _rows(rows: Any) -> tuple[BandwidthRow, ...]:
    try:
        return tuple(from_jsonable(BandwidthRow, row) for row in rows or [])
    except (CodecError, TypeError):
        return ()


def bandwidth_errors_of(ranks: tuple[RankFacts, ...]) -> dict[str, str]:
    errors = _stage_data(ranks, 0, "bandwidth").get("errors") or {}
    return {str(op): str(why) for op, why in errors.items()} if isinstance(errors, dict) else {}


def peer_access_of(ranks: tuple[RankFacts, ...]) -> tuple[PeerAccess, ...]:
    rows = _stage_data(ranks, 0, "identity").get("peer_access") or []
    try:
        return tuple(from_jsonable(PeerAccess, row) for row in rows)
    except CodecError:
        return ()


def torch_facts_from_job(ranks: tuple[RankFacts, ...]) -> dict[str, Any] | None:
    """Each node's first rank describes its torch in the identity stage: no separate torch
    import needed. The lowest rank that did is this node's."""
    for rank in sorted(ranks, key=lambda r: r.rank):
        described = _own_data(rank, "identity").get("torch")
        if described:
            return described
    return None


def _own_data(rank: RankFacts, stage: str) -> dict[str, Any]:
    record = rank.stage(stage)
    return dict(record.data) if record is not None and record.data else {}


def _stage_data(ranks: tuple[RankFacts, ...], rank: int, stage: str) -> dict[str, Any]:
    for facts in ranks:
        if facts.rank == rank:
            record = facts.stage(stage)
            if record is not None and record.data:
                return dict(record.data)
    return {}
