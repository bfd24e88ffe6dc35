"""Root cause first.

A failed distributed run prints the real error once, on one rank, and then a pile of
consequences on every other rank (timeouts, closed connections, SIGTERMs). The order:

1. causes before symptoms before notes (an exception text before the watchdog timeouts it
   caused; a deprecation warning last);
2. within each, the rank torchrun named in "Root Cause (first observed failure)", then the
   first rank that printed a cause, then everything else;
3. then the first line in time (the log's order).
"""

from __future__ import annotations

from collections.abc import Iterable

from .aggregate import CodeTally

ROOT_CAUSE_PRIORITY = 3  # the priority patterns.py gives torchrun's summary


def root_cause_order(tallies: Iterable[CodeTally], root_code: str) -> list[CodeTally]:
    tallies = list(tallies)
    root_rank = _torchrun_root_rank(tallies, root_code)
    first_rank = _first_failing_rank(tallies, exclude=root_rank)

    def group(tally: CodeTally) -> int:
        rank = tally.rank
        if rank is not None and rank == root_rank:
            return 0
        if rank is not None and rank == first_rank:
            return 1
        return 2

    return sorted(tallies, key=lambda t: (t.role, group(t), t.first_line, t.code))


def _torchrun_root_rank(tallies: list[CodeTally], root_code: str) -> object:
    for tally in tallies:
        if tally.code == root_code and tally.primary.pattern.priority >= ROOT_CAUSE_PRIORITY:
            return tally.rank
    return None


def _first_failing_rank(tallies: list[CodeTally], exclude: object) -> object:
    ranked = [t for t in tallies if t.rank is not None and t.rank != exclude]
    causes = [t for t in ranked if t.role == 0] or ranked
    return min(causes, key=lambda t: t.first_line).rank if causes else None
