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

from collections.abc import Iterable, Mapping

from ddp_doctor.logscan.aggregate import CodeTally
from ddp_doctor.logscan.pattern import Role

ROOT_CAUSE_PRIORITY = 3  # the priority patterns.py gives torchrun's summary
Who = tuple[object, ...]


def root_cause_order(tallies: Iterable[CodeTally], root_code: str) -> list[CodeTally]:
    tallies = list(tallies)
    root = _torchrun_root(tallies, root_code)
    root_names = _names(root.facts()) if root else set()
    first = _first_failing(tallies, exclude=root_names)

    def group(tally: CodeTally) -> int:
        who = _who(tally.facts())
        if who is not None and who in root_names:
            return 0
        return 1 if who is not None and who == first else 2

    return sorted(tallies, key=lambda t: (t.role, group(t), t.first_line, t.code))


def _who(facts: Mapping[str, object]) -> Who | None:
    """Who printed it: the global rank, else (SLURM task, local rank) from "[defaultN]:"."""
    if isinstance(facts.get("rank"), int):
        return ("rank", facts["rank"])
    if isinstance(facts.get("local_rank"), int):
        return ("local", facts.get("task"), facts["local_rank"])
    return None


def _names(facts: Mapping[str, object]) -> set[Who]:
    """Every way a line of the root cause's rank may be attributed."""
    names = {("rank", facts.get("rank")), ("local", facts.get("task"), facts.get("local_rank"))}
    return names | {("local", None, facts.get("local_rank"))}


def _torchrun_root(tallies: list[CodeTally], root_code: str) -> CodeTally | None:
    for tally in tallies:
        if tally.code == root_code and tally.primary.pattern.priority >= ROOT_CAUSE_PRIORITY:
            return tally
    return None


def _first_failing(tallies: list[CodeTally], exclude: set[Who]) -> Who | None:
    known = [t for t in tallies if (who := _who(t.facts())) is not None and who not in exclude]
    causes = [t for t in known if t.role == Role.CAUSE] or known
    return _who(min(causes, key=lambda t: t.first_line).facts()) if causes else None
