"""DDP9xx: the doctor itself could not look at something, and says so."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts import FactSet
from ddp_doctor.model import ProbeStatus, Remediation
from ddp_doctor.registry import Hit, describe, rule

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
        if result.status is ProbeStatus.TIMED_OUT:
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
    """What it finds: a probe that failed with a reason (other than python, torch and the job,
    which have DDP012, DDP001 and the job codes).
    Why it matters: a clean report is then not proof that this part of the setup is fine.
    Example: NVML answering "Unknown Error" for the device count.
    Fix: the probe's error names the cause; fix it and run again.
    """
    for result in facts.results.values():
        if result.status is ProbeStatus.FAILED and result.probe not in ("torch", "job", "python"):
            yield Hit(
                f"probe {result.probe!r} failed: {result.error}",
                {"probe": result.probe, "error": result.error},
            )
