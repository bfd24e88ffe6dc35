"""`run --isolate` on node 0: the pair tests every round recorded, settled into IsolationFacts
by replaying the rounds' scheduler (patient/pair_rounds.py) on them, so node 0's verdict and a
re-judged report agree with what the nodes decided in the job."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddp_doctor.facts.cluster import IsolationFacts, NodeLink, PairTest
from ddp_doctor.patient.pair_rounds import Isolation, record
from ddp_doctor.readings.isolation import (
    BAND_FLOOR_FABRIC,
    BAND_FLOOR_SOCKETS,
    far_under,
    pair_band,
    pair_failure,
)

SLOW_BELOW = 0.5  # of the median (or of the expected band): a slower pair fails


def isolation_facts(
    nodes: int,
    pairs: Sequence[PairTest],
    expected_gbps: float | None = None,
    links: Mapping[int, NodeLink] | None = None,
    backend: str | None = None,
) -> IsolationFacts:
    """The rounds replayed against the running median (as node 0 decided them), and apart
    from them each pair against its nodes' stated link rates (`links`, where known)."""
    rounds = max((p.round for p in pairs), default=0)
    facts = IsolationFacts(
        pairs=tuple(pairs),
        rounds=rounds,
        median_gbps=_median(pairs, rounds),
        expected_gbps=expected_gbps,
        slow_below=SLOW_BELOW,
    )
    state = Isolation(nodes)
    for number in range(1, facts.rounds + 1):
        # judged as node 0 judged it in the job: against the median of the pairs so far
        so_far = dataclasses.replace(facts, median_gbps=_median(pairs, number))
        outcomes = {p.nodes: pair_failure(p, so_far) is None for p in pairs if p.round == number}
        record(state, outcomes)
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


def _median(pairs: Sequence[PairTest], up_to_round: int) -> float | None:
    measured = [
        p.gbps for p in pairs if p.round <= up_to_round and p.connected and p.gbps is not None
    ]
    return statistics.median(measured) if measured else None


def _fields(facts: IsolationFacts) -> dict[str, Any]:
    return {
        "pairs": facts.pairs,
        "rounds": facts.rounds,
        "median_gbps": facts.median_gbps,
        "expected_gbps": facts.expected_gbps,
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
