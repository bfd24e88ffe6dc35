"""DDP9xx: the doctor itself could not look at something, and says so."""

from __future__ import annotations

import math
from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import ProbeStatus, Remediation
from ddp_doctor.registry import Hit, describe, rule
from ddp_doctor.rules.jobreading import cut_by_timeout, rank_list

DEFAULT_RUN_TIMEOUT_S = 120  # run's --timeout default
# Probes whose failure has a code of its own (DDP001, the job codes, DDP012, DDP905).
PROBES_WITH_OWN_CODES = ("torch", "job", "python", "workspace")

REPORT_BUG = Remediation(
    "This is a ddp-doctor bug: run again with --format markdown and attach the report to an issue "
    "at the ddp-doctor tracker. The other probes' results still stand."
)


@rule("DDP901", REPORT_BUG)
def probe_crashed(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a probe that ended with an exception instead of facts.
    Why it matters: the checks that need those facts could not run; a clean report is then
    not proof that this part of the setup is fine.
    Example: the NVML probe crashing on an unusual driver answer.
    Fix: report it with the markdown report attached; meanwhile read the probe's error.
    """
    for result in facts.results.values():
        if result.status is ProbeStatus.CRASHED:
            yield Hit(
                f"probe {result.probe!r} crashed: {result.error}",
                {"probe": result.probe, "error": result.error},
            )


@rule(
    "DDP902",
    Remediation(
        "Something on this machine answers very slowly (often a hung driver or a stuck "
        "filesystem). Check `nvidia-smi` and `dmesg`, or raise --timeout."
    ),
)
def probe_timed_out(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a probe still running when its limit passed.
    Why it matters: a query that hangs here (NVML, importing torch) usually hangs training too.
    Example: `import torch` taking over 30 s on a network filesystem; NVML stuck on a GPU that
    fell off the bus.
    Fix: look at what that probe touches (driver, filesystem); raise --timeout if it is only slow.
    """
    for result in facts.results.values():
        # a job or traced run cut at --timeout keeps its facts (DDP906 and the trace codes
        # judge those); a Python that hangs is DDP012
        timed_out = result.status is ProbeStatus.TIMED_OUT and result.facts is None
        if timed_out and result.probe != "python":
            yield Hit(
                f"probe {result.probe!r} timed out: {result.error}",
                {"probe": result.probe, "seconds": result.duration_s},
            )


describe(
    "DDP903",
    REPORT_BUG,
    """What it finds: a rule that failed on facts it did not expect (the engine reports it).
    Why it matters: that one check is missing from the report; the others still ran.
    Example: a fact recorded by a newer ddp-doctor version, replayed with `diagnose`.
    Fix: report it with the markdown report attached.
    """,
)


@rule(
    "DDP904",
    Remediation(
        "Read the probe's error in the report; the checks that need its facts were skipped."
    ),
)
def probe_failed(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a probe that failed with a reason (other than python, torch, the job and
    the doctor's workspace, which have DDP012, DDP001, the job codes and DDP905).
    Why it matters: a clean report is then not proof that this part of the setup is fine.
    Example: NVML answering "Unknown Error" for the device count.
    Fix: the probe's error names the cause; fix it and run again.
    """
    for result in facts.results.values():
        if result.status is ProbeStatus.FAILED and result.probe not in PROBES_WITH_OWN_CODES:
            yield Hit(
                f"probe {result.probe!r} failed: {result.error}",
                {"probe": result.probe, "error": result.error},
            )


@rule(
    "DDP905",
    Remediation(
        "Give the doctor what it needs to start its job: a writable temporary folder (set "
        "TMPDIR to one with free space), a Python it can execute, and room for new processes "
        "(`ulimit -u`); then run again.",
        ('df -h "${TMPDIR:-/tmp}"', "ulimit -u"),
    ),
)
def job_launch_failed(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the doctor's own failure to start its job: no temporary folder could be
    made, the job's or a probe's files could not be written, or torchrun (or the first probe
    in the patient's Python) could not be spawned.
    Why it matters: nothing about distributed training was tested, so the report cannot say
    whether the setup works; the run exits with code 2 ("the doctor could not run").
    Example: TMPDIR and /tmp on a full or read-only filesystem; a process limit reached.
    Fix: a writable TMPDIR with free space, an executable Python, room for more processes.
    """
    workspace = facts.results.get("workspace")
    if workspace is not None and workspace.status is not ProbeStatus.OK:
        yield Hit(f"the doctor could not run: {workspace.error}", {"reason": workspace.error})
    python = facts.results.get("python")
    if python is not None and python.status is ProbeStatus.FAILED and python.facts is None:
        # the patient's own failures always come with facts (DDP012); none: the doctor's
        yield Hit(
            f"the doctor could not examine the Python that trains: {python.error}",
            {"reason": python.error},
        )
    job = facts.job
    if job is not None and job.launch_error:
        yield Hit(f"the job was not started: {job.launch_error}", {"reason": job.launch_error})


@rule(
    "DDP906",
    Remediation(
        "Run again with a longer --timeout (the finding names one); the job itself had not "
        "failed when time ran out."
    ),
)
def job_cut_by_timeout(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the run's --timeout killing the job while every unfinished rank was still
    within the limit its own stage has (the rendezvous and collective timeouts), and no rank
    had failed.
    Why it matters: the job was cut short, not broken: nothing about the stages it did not
    reach is known, and naming a rank that "never joined" would send you after a fault that
    is not there.
    Example: `ddp-doctor run --timeout 5` on a machine where importing torch alone takes 4 s.
    Fix: a longer --timeout.
    """
    job = facts.job
    cut = cut_by_timeout(job) if job is not None else []
    if not cut:
        return
    asked = facts.plan.timeout_s or job.timeout_s
    suggested = max(DEFAULT_RUN_TIMEOUT_S, math.ceil(2 * asked))
    stages = sorted({c.stage for c in cut}, key=lambda s: (s != "starting", s))
    slowest = max(c.running_s for c in cut)
    yield Hit(
        f"--timeout {asked:g} ended the job after {job.duration_s:.1f} s (it had "
        f"{job.timeout_s:.1f} s of it) while rank(s) {rank_list(c.rank for c in cut)} were "
        f"still {' or '.join(_where(s) for s in stages)}, within their own limits; try "
        f"--timeout {suggested}",
        {
            "stages": stages,
            "ranks": sorted(c.rank for c in cut),
            "job_timeout_s": job.timeout_s,
            "run_timeout_s": asked,
            "longest_in_stage_s": slowest,
            "suggested_timeout_s": suggested,
        },
        fix=Remediation(
            f"Run again with --timeout {suggested}; the job itself had not failed when time "
            "ran out.",
            (f"ddp-doctor run --timeout {suggested}",),
        ),
    )


def _where(stage: str) -> str:
    return "starting" if stage == "starting" else f"in stage {stage}"


describe(
    "DDP907",
    Remediation(
        "Give `logs` the part of the log around the failure, e.g. its end, where a failed run's "
        "root cause usually is: `tail -c 2G FILE > end.log; ddp-doctor logs end.log`.",
        ("tail -c 2G FILE > end.log", "ddp-doctor logs end.log"),
    ),
    """What it finds: a log longer than `logs` reads: 4 GiB of a file (after gzip and UTF-16
    decoding), 256 MiB of stdin. Of a plain file only its last 4 GiB were diagnosed (where a
    failed run ends); of stdin or a compressed file only the first part. For `logs DIR`: the
    files after the first 10,000, folders deeper than 8 levels, and logs after the first
    256 MiB of text, which were not read at all.
    Why it matters: scanning is linear (hundreds of MB/s) and its memory flat, but an endless
    stdin would never end: the limits bound the time. A root cause outside the part read is not
    in the report.
    Example: a week of NCCL_DEBUG=INFO output from 512 ranks in one SLURM .out file.
    Fix: pass the part of the log around the failure (`tail -c 2G FILE > end.log`), or the
    folder of the failed run's own logs.
    """,
)
