"""Whether the logging of a module is set up where it runs on every rank (DDP119).

A module that only calls `logger.info(...)` leaves the output to whoever configures logging:
often a launcher or an entry script out of view, per rank. When the entry point of its
program is in view and configures logging for every process (`logging.basicConfig(level=
logging.INFO)` in train.py's main, no rank term, no guard: flow_matching's examples/image),
the module's records are printed by every rank.
"""

from __future__ import annotations

from ddp_doctor.script.evidence import is_entry_point, program_files
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.rankflow import (
    logging_configured_here,
    logging_is_rank_aware,
    logging_quiet,
)


def logging_left_to_others(facts: ScriptFacts) -> bool:
    """rankflow.logging_quiet, less the module whose program's entry point in view sets
    logging up for every rank: there the module's records reach every rank's output."""
    if logging_configured_here(facts) or not logging_quiet(facts):
        return logging_quiet(facts)
    mates = [f for f in program_files(facts) if f.is_python and f is not facts]
    entries = [f for f in mates if is_entry_point(f) and logging_configured_here(f)]
    if not entries:
        return True  # configured out of view: often per rank
    return any(logging_is_rank_aware(f) for f in mates)
