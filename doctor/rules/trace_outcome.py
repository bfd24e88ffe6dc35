"""DDP908: a traced run that did not succeed always leaves an error in the report.

Runs after the traced run's own pass (judge._traced_run): a run stopped at --timeout while no
rank waited in a collective, or one that exited non-zero with nothing found, must never read
"No problems found" and exit 0: the exit code gates CI.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddp_doctor.facts.trace import TraceFacts
from ddp_doctor.model import Finding, Remediation, Severity
from ddp_doctor.registry import Hit, describe, spec_for

describe(
    "DDP908",
    Remediation(
        "Bound the run by work, not time (--steps N or --epochs N), or raise --timeout; where "
        "the ranks were when it was stopped (-v) says what they were doing. For a run that "
        "failed, read the end of its output (-v)."
    ),
    """What it finds: `trace` stopped the user's run at its --timeout while no rank waited in a
    collective (every rank computing, loading data or sleeping), or the run exited non-zero,
    and no other finding names a cause.
    Why it matters: the run did not finish what it was given; a report that says "No problems
    found" and exits 0 would pass a CI gate on a run that never completed.
    Example: `ddp-doctor trace --timeout 60 -- torchrun train.py` on a script that trains for
    an hour, or a data loader stuck on a network filesystem.
    Fix: --steps or --epochs to stop at a point of the work, or a longer --timeout; read where
    the ranks were (-v) for a rank stuck outside collectives.""",
)


def unfinished_run_findings(trace: TraceFacts, found: Sequence[Finding]) -> list[Finding]:
    """DDP908 when the run did not succeed and no error explains it."""
    if any(f.severity >= Severity.ERROR for f in found):
        return []
    if trace.launched and trace.outcome in ("timeout", "hang"):
        return [spec_for("DDP908").finding(_stopped_hit(trace))]
    if trace.launched and trace.exit_code not in (None, 0):
        message = f"the traced run exited with code {trace.exit_code} and nothing names a cause"
        hit = Hit(message, {"outcome": trace.outcome, "exit_code": trace.exit_code})
        return [spec_for("DDP908").finding(hit)]
    return []


def _stopped_hit(trace: TraceFacts) -> Hit:
    forensics = trace.forensics
    places = []
    if forensics is not None:
        for snapshot in forensics.ranks:
            state = "had exited" if snapshot.exited else f"at {snapshot.where or 'an unknown line'}"
            places.append(f"rank {snapshot.rank} {state}")
    where = f"; {', '.join(places)}" if places else ""
    message = (
        f"the traced run was stopped at its time limit (--timeout {trace.timeout_s:g} s) after "
        f"{trace.duration_s:.0f} s with no rank waiting in a collective{where}"
    )
    return Hit(
        message,
        {"outcome": trace.outcome, "timeout_s": trace.timeout_s, "duration_s": trace.duration_s},
    )
