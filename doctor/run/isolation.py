"""`run --isolate` on node 0: the pair tests every round recorded, settled into IsolationFacts
by replaying the rounds' scheduler (patient/pair_rounds.py) on them, so node 0's verdict and a
re-judged report agree with what the nodes decided in the job."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddp_doctor.facts.cluster import IsolationFacts, NodeLink, PairTest
from ddp_doctor.patient.pair_rounds import (
    Isolation,
    Outcome,
    pair_outcome,
    record,
    reference_gbps,
)
from ddp_doctor.readings.isolation import (
    BAND_FLOOR_FABRIC,
    BAND_FLOOR_SOCKETS,
    far_under,
    pair_band,
)

SLOW_BELOW = 0.5  # of round 1's median: a slower pair fails


def isolation_facts(
    nodes: int,
    pairs: Sequence[PairTest],
    links: Mapping[int, NodeLink] | None = None,
    backend: str | None = None,
    slow_below: float = SLOW_BELOW,
) -> IsolationFacts:
    """The rounds replayed against round 1's median (as node 0 decided them), and apart
    from them each pair against its nodes' stated link rates (`links`, where known)."""
    rounds = max((p.round for p in pairs), default=0)
    facts = IsolationFacts(
        pairs=tuple(pairs),
        rounds=rounds,
        median_gbps=_reference(pairs),
        slow_below=slow_below,
    )
    state = Isolation(nodes)
    for number in range(1, facts.rounds + 1):  # as node 0 decided them in the job
        record(state, {p.nodes: _outcome(p, facts) for p in pairs if p.round == number})
    untested = set(range(nodes)) - state.good - state.bad - state.suspects
    fabric = backend == "nccl"
    floor = BAND_FLOOR_FABRIC if fabric else BAND_FLOOR_SOCKETS
    bands = [
        pair_band(nodes, links or {}, fabric) for nodes in dict.fromkeys(p.nodes for p in pairs)
    ]
    known = tuple(band for band in bands if band is not None)
    under = far_under(pairs, known, floor)
    return IsolationFacts(
        **{**_fields(facts), "bad": tuple(sorted(state.bad))},
        unsettled=tuple(sorted(state.suspects | (untested if pairs else set()))),
        bands=tuple(band for band in known if band.nodes in under),  # the report stays small
        banded_pairs=len(known),
        band_floor=floor if known else None,
        under_band=under,
    )


def _reference(pairs: Sequence[PairTest]) -> float | None:
    """Round 1's median, as node 0 judged against it (pair_rounds.reference_gbps)."""
    return reference_gbps((p.round, p.gbps) for p in pairs if p.connected and p.gbps is not None)


def _fields(facts: IsolationFacts) -> dict[str, Any]:
    return {
        "pairs": facts.pairs,
        "rounds": facts.rounds,
        "median_gbps": facts.median_gbps,
        "slow_below": facts.slow_below,
    }


def pair_tests(rows: Iterable[Any]) -> list[PairTest]:
    """PairTests from the rows the ranks posted (malformed rows left out)."""
    from ddp_doctor.codec import CodecError, from_jsonable

    found = []
    for row in rows:
        try:
            found.append(from_jsonable(PairTest, row))
        except (CodecError, TypeError):
            continue
    return found


def _outcome(pair: PairTest, facts: IsolationFacts) -> Outcome:
    """As node 0 decided it in the job: the same judgement, the same reference."""
    return pair_outcome(pair.connected, pair.exact, pair.gbps, facts.median_gbps, facts.slow_below)
