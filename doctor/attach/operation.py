"""The `attach` operation: find the job, sample its ranks within the time limit, hand back the
probe results the judge reads. The command prints; this decides nothing."""

from __future__ import annotations

import time
from dataclasses import replace

from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.attach.collect import AttachError, AttachRequest, collect_attach
from ddp_doctor.progress import Progress

__all__ = ["AttachError", "AttachRequest", "attach_results", "slurm_results"]


def slurm_results(job_id: str, request: AttachRequest, progress: Progress) -> list[ProbeResult]:
    """attach on every node of a SLURM job (srun --overlap), merged into one job."""
    from ddp_doctor.attach.merge import MergeError, merge_nodes
    from ddp_doctor.facts.attach import SourceStatus
    from ddp_doctor.probes.attach.slurm import SlurmUnavailable, run_on_nodes
    from ddp_doctor.report_io import ReportError, report_from_json

    started = time.monotonic()
    options = ["--interval", f"{request.interval_s:g}", "--samples", str(request.samples)]
    options += ["--timeout", f"{request.timeout_s:g}"] + (["--native"] if request.native else [])
    progress.say(f"attach: srun --overlap on every node of SLURM job {job_id}")
    try:
        reports, failed = run_on_nodes(job_id, options, request.timeout_s)
        nodes, broken = [], dict(failed)
        for task, document in reports.items():
            try:
                probes = report_from_json(document).probes
            except ReportError as error:
                broken[task] = str(error)
                continue
            nodes.extend(p.facts for p in probes if p.probe == "attach" and p.facts)
        if not nodes:
            raise AttachError(f"no node of SLURM job {job_id} gave a report: {broken}")
        merged = merge_nodes(nodes)
    except (SlurmUnavailable, MergeError) as error:
        raise AttachError(str(error)) from None
    finally:
        progress.done()
    notes = tuple(SourceStatus(f"srun task {t}", "failed", why) for t, why in broken.items())
    merged = replace(merged, sources=(*merged.sources, *notes))
    return [ProbeResult("attach", ProbeStatus.OK, merged, round(time.monotonic() - started, 3))]


def attach_results(request: AttachRequest, progress: Progress) -> list[ProbeResult]:
    """One "attach" probe result; AttachError (no job, several) goes to the command."""
    started = time.monotonic()
    try:
        facts = collect_attach(request, progress.say)
    finally:
        progress.done()
    return [ProbeResult("attach", ProbeStatus.OK, facts, round(time.monotonic() - started, 3))]
