"""The one adapter between attach and the collective analysis that `trace` and `logs` use
(readings/collective_progress.py): each rank's place becomes that analysis's record type, and
its answers come back unchanged.

Without a flight recorder, a stack shows the collective a rank waits in but not its sequence
number; ranks of one process group blocked in collectives at the same time are at the same
point of that group (none can pass a collective another has not entered), so they share one
point, numbered 0 here, and the analysis compares what they called there."""

from __future__ import annotations

from collections.abc import Mapping

from ddp_doctor.attach.places import BACKWARD, COLLECTIVE, INIT, Place
from ddp_doctor.facts.collectives import PENDING, CollectiveCall, RankCollectives
from ddp_doctor.readings.collective_progress import (
    CollectiveProgress,
    Mismatch,
    Stall,
    collective_progress,
)

UNKNOWN_SEQ = 0
__all__ = ["UNKNOWN_SEQ", "Mismatch", "Stall", "calls_of", "mismatches", "stall"]


def calls_of(places: Mapping[int, Place]) -> dict[int, tuple[CollectiveCall, ...]]:
    """rank -> the pending call its stack shows (none when it is outside collectives)."""
    calls: dict[int, tuple[CollectiveCall, ...]] = {}
    for rank, place in places.items():
        if place.kind in (COLLECTIVE, BACKWARD, INIT) and place.op:
            where = str(place.site) if place.site else None
            call = CollectiveCall(UNKNOWN_SEQ, place.op, state=PENDING, where=where)
            calls[rank] = (call,)
        else:
            calls[rank] = ()
    return calls


def stall(
    places: Mapping[int, Place], records: Mapping[int, tuple[CollectiveCall, ...]] | None = None
) -> Stall | None:
    """From the ranks' flight recorders where every rank has one (they know the sequence
    numbers), else from their stacks."""
    stalls = _progress(places, records).stalls
    return stalls[0] if stalls else None


def mismatches(
    places: Mapping[int, Place], records: Mapping[int, tuple[CollectiveCall, ...]] | None = None
) -> list[Mismatch]:
    return _progress(places, records).mismatches


def _progress(
    places: Mapping[int, Place], records: Mapping[int, tuple[CollectiveCall, ...]] | None
) -> CollectiveProgress:
    calls = records if records else calls_of(places)
    return collective_progress([RankCollectives(rank, tuple(c)) for rank, c in calls.items()])
