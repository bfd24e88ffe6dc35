"""Renderers: table for terminals, json for machines, markdown for support issues.

Secrets are redacted in every format unless the user asks otherwise (--no-redact); json and
markdown are shareable, so they also lose the home folder and user name (redact.py). Each
renderer is imported when used: `check` and `logs` start without the job tables.
"""

from __future__ import annotations

from typing import Any

from ddp_doctor import strict_json
from ddp_doctor.codec import to_jsonable
from ddp_doctor.model import Report


def render(
    report: Report,
    fmt: str,
    verbose: bool = False,
    redact_hosts: bool = False,
    redact: bool = True,
) -> str:
    if fmt == "table":
        from ddp_doctor.render.table import render_table

        return render_table(secrets_out(report) if redact else report, verbose=verbose)
    if redact:
        document = shareable_document(report, redact_hosts)
    else:
        from ddp_doctor.report_io import report_to_json

        document = to_jsonable(report_to_json(report))
    if fmt == "json":
        return strict_json.dumps(document, indent=2, ensure_ascii=False)
    if fmt == "markdown":
        from ddp_doctor.render.markdown import render_markdown

        return render_markdown(document)
    raise ValueError(f"unknown format {fmt!r}")


def shareable_document(report: Report, redact_hosts: bool = False) -> dict[str, Any]:
    """The report's JSON form with secrets (and on request hosts) replaced."""
    from ddp_doctor.redact import Redactor
    from ddp_doctor.report_io import report_to_json

    redactor = Redactor.for_this_machine(redact_hosts, hostnames=_reported_hostnames(report))
    return redactor.document(to_jsonable(report_to_json(report)))  # tuples as lists, redacted too


def secrets_out(report: Report) -> Report:
    """The report with secrets redacted, for the renderers that draw from the object."""
    from ddp_doctor.redact import Redactor
    from ddp_doctor.render.redacted import redacted

    return redacted(report, Redactor())


def _reported_hostnames(report: Report) -> tuple[str, ...]:
    names = []
    for result in report.probes:
        hostname = getattr(result.facts, "hostname", None)
        if isinstance(hostname, str) and hostname:
            names.append(hostname)
        names.extend(getattr(result.facts, "hostnames", ()) or ())
    return tuple(names)
