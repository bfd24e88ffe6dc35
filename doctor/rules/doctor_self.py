"""DDP9xx: the doctor itself could not look at something, and says so."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts import FactSet
from ddp_doctor.model import ProbeStatus, Remediation, Severity
from ddp_doctor.registry import Hit, rule

REPORT_BUG = Remediation(
    "This is a ddp-doctor bug: run again with --format markdown and attach the report to an issue "
    "at the ddp-doctor tracker. The other probes' results still stand."
)


@rule("DDP901", "probe-crashed", Severity.WARNING, REPORT_BUG)
def probe_crashed(facts: FactSet) -> Iterator[Hit]:
    """A probe raised an unexpected error, so what it measures is missing from the report.

    What it finds: a probe that ended with an exception instead of facts.
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
    "probe-timed-out",
    Severity.WARNING,
    Remediation(
        "Something on this machine answers very slowly (often a hung driver or a stuck "
        "filesystem). Check `nvidia-smi` and `dmesg`, or raise --timeout."
    ),
)
def probe_timed_out(facts: FactSet) -> Iterator[Hit]:
    """A probe did not answer within its time limit and was abandoned.

    What it finds: a probe still running when its limit passed.
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


@rule("DDP903", "rule-crashed", Severity.WARNING, REPORT_BUG)
def rule_crashed(facts: FactSet) -> Iterator[Hit]:
    """A rule raised an error while judging the facts, so its problem was not checked.

    What it finds: a rule that failed on facts it did not expect (the engine reports it).
    Why it matters: that one check is missing from the report; the others still ran.
    Example: a fact recorded by a newer ddp-doctor version, replayed with `diagnose`.
    Fix: report it with the markdown report attached.
    """
    return iter(())


@rule(
    "DDP904",
    "probe-failed",
    Severity.WARNING,
    Remediation(
        "Read the probe's error in the report; the checks that need its facts were skipped."
    ),
)
def probe_failed(facts: FactSet) -> Iterator[Hit]:
    """A probe ran but could not measure, so the checks that need it were skipped.

    What it finds: a probe that failed with a reason (other than torch, which has DDP001).
    Why it matters: a clean report is then not proof that this part of the setup is fine.
    Example: NVML answering "Unknown Error" for the device count.
    Fix: the probe's error names the cause; fix it and run again.
    """
    for result in facts.results.values():
        if result.status is ProbeStatus.FAILED and result.probe not in ("torch", "job"):
            yield Hit(
                f"probe {result.probe!r} failed: {result.error}",
                {"probe": result.probe, "error": result.error},
            )
