"""GitHub Actions workflow commands: each finding becomes an annotation on the pull request.

https://docs.github.com/actions/reference/workflow-commands-for-github-actions
"""

from __future__ import annotations

from ddp_doctor.model import Finding, Report, Severity

_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render_github(report: Report) -> str:
    return "".join(annotation(finding) + "\n" for finding in report.findings)


def annotation(finding: Finding) -> str:
    properties = []
    where = finding.location
    if where is not None:
        properties.append(f"file={_property(where.path)}")
        if where.line and where.cell is None:  # a cell's line is not a line of the .ipynb
            properties.append(f"line={where.line}")
        if where.column and where.cell is None:
            properties.append(f"col={where.column}")
    cell = "" if where is None or where.cell is None else f" (cell {where.cell})"
    properties.append(f"title={_property(f'{finding.code} {finding.name}{cell}')}")
    return f"::{_LEVELS[finding.severity]} {','.join(properties)}::{_data(finding.message)}"


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
