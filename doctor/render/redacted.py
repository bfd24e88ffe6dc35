"""Secrets out of a Report object, for the renderers that draw from one (table, and check's
text, sarif and github): every text the report carries goes through the same Redactor as
json and markdown output. Locations stay as they are: sarif and github point at files by them.
"""

from __future__ import annotations

from dataclasses import replace

from ddp_doctor.codec import CodecError, from_jsonable, to_jsonable
from ddp_doctor.model import Finding, ProbeResult, Remediation, Report
from ddp_doctor.redact import Redactor


def redacted(report: Report, redactor: Redactor) -> Report:
    return replace(
        report,
        probes=tuple(_probe(result, redactor) for result in report.probes),
        findings=tuple(_finding(finding, redactor) for finding in report.findings),
        command=redactor.text(report.command) if report.command else report.command,
    )


def _finding(finding: Finding, redactor: Redactor) -> Finding:
    fix = finding.fix
    if fix is not None:
        fix = Remediation(redactor.text(fix.text), tuple(redactor.text(c) for c in fix.commands))
    return replace(
        finding,
        message=redactor.text(finding.message),
        fix=fix,
        evidence=redactor.document(to_jsonable(dict(finding.evidence))),
    )


def _probe(result: ProbeResult, redactor: Redactor) -> ProbeResult:
    facts = result.facts
    if facts is not None:
        try:
            facts = from_jsonable(type(facts), redactor.document(to_jsonable(facts)), result.probe)
        except CodecError:  # facts that cannot be redacted are not shown
            facts = None
    error = redactor.text(result.error) if result.error else result.error
    return replace(result, facts=facts, error=error)
