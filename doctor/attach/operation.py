"""The `attach` operation: find the job, sample its ranks within the time limit, hand back the
probe results the judge reads. The command prints; this decides nothing."""

from __future__ import annotations

import time

from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.attach.collect import AttachError, AttachRequest, collect_attach
from ddp_doctor.progress import Progress

__all__ = ["AttachError", "AttachRequest", "attach_results"]


def attach_results(request: AttachRequest, progress: Progress) -> list[ProbeResult]:
    """One "attach" probe result; AttachError (no job, several) goes to the command."""
    started = time.monotonic()
    try:
        facts = collect_attach(request, progress.say)
    finally:
        progress.done()
    return [ProbeResult("attach", ProbeStatus.OK, facts, round(time.monotonic() - started, 3))]
