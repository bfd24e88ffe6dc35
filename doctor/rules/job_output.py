"""The job's own output read through the shared log patterns, and a failure nobody explained.

Runs after the facts rules (engine.judge), since both need to know what those found.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Finding, Remediation, Severity
from ddp_doctor.registry import Hit, describe, spec_for
from ddp_doctor.rules.jobreading import job_failed

JOB_FAILED = describe(
    "DDP308",
    Remediation(
        "Read the job output in the report (-v, or --format json: probes[job].facts.output_tail); "
        "run again with NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL for more detail."
    ),
    """What it finds: a torchrun job that exited non-zero or ran past its time while no rendezvous,
collective or log-pattern finding names a cause.
Why it matters: the setup cannot run a minimal DDP job; real training will fail too.
Example: a driver crash inside a collective that prints nothing known.
Fix: the job's output, with NCCL_DEBUG=INFO for more.""",
)
# DDP906 too: a job cut by --timeout is explained by that. Only an error explains a failed job:
# a warning (DDP008's small /dev/shm, DDP503's NCCL WARN) may be true and still not the cause,
# and a failed job must never leave the report without an error (the exit code gates CI).
EXPLAINING_PREFIXES = ("DDP00", "DDP2", "DDP3", "DDP4", "DDP5", "DDP906")
# Codes the job's own facts decide better than its texts: a bystander's timeout text must not
# name it as the crashed rank, and the journals know who never joined or hung. DDP231-DDP234
# and DDP504 are what the log table concludes about the same texts (a client's store timeout,
# a peer that left, a SIGKILL nothing explains), which the journals decide here too.
TEXT_CONCLUSIONS = frozenset({"DDP231", "DDP232", "DDP233", "DDP234", "DDP504"})
JUDGED_FROM_FACTS = (
    frozenset({"DDP201", "DDP202", "DDP203", "DDP301", "DDP302", "DDP305", "DDP307"})
    | TEXT_CONCLUSIONS
)


def job_output_findings(facts: FactSet, found: Sequence[Finding]) -> list[Finding]:
    job = facts.job
    if not job or not job.launched:
        return []
    known = {g.code for g in found} | JUDGED_FROM_FACTS
    extra = [f for f in _scan(_job_texts(job)) if f.code not in known]
    explained = any(
        f.code.startswith(EXPLAINING_PREFIXES) and f.severity >= Severity.ERROR
        for f in [*found, *extra]
    )
    if job_failed(job) and not explained:
        how = "ran past its time limit" if job.timed_out else f"exited with code {job.exit_code}"
        last_line = next(
            (line for line in reversed(job.output_tail.splitlines()) if line.strip()), ""
        )
        extra.append(
            spec_for("DDP308").finding(
                Hit(
                    f"the {job.nproc}-rank {job.backend} job {how}; last output: {last_line.strip()[:200]}",
                    {"exit_code": job.exit_code, "timed_out": job.timed_out},
                )
            )
        )
    return extra


def _job_texts(job: JobFacts) -> str:
    """torchrun's output, then each rank's own recorded errors (its "error file")."""
    errors = [
        f"[rank{rank.rank}]: {record.error}"
        for rank in job.ranks
        for record in rank.stages
        if record.error
    ]
    return "\n".join([job.output_tail, *errors])


def _scan(text: str) -> list[Finding]:
    if not text:
        return []
    try:
        from ddp_doctor.logscan import scan_text
    except ImportError:  # the log patterns are optional for the job rules
        return []
    return [_from_job(finding) for finding in scan_text(text)]


def _from_job(finding: Finding) -> Finding:
    from dataclasses import replace

    return replace(finding, evidence={**finding.evidence, "source": "job output"})
