"""The terminal report: probes with status and time, then findings by severity, fix below."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import click
from tabulate import tabulate

from ddp_doctor.codec import to_jsonable
from ddp_doctor.model import Finding, ProbeResult, Report, Severity

from .job_tables import render_job_text

SEVERITY_COLOURS = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render_table(report: Report, verbose: bool = False, colour: bool | None = None) -> str:
    colour = _use_colour() if colour is None else colour
    parts = [f"ddp-doctor {report.tool_version}  {report.created}"]
    if report.probes:
        parts.append(_probe_table(report.probes))
    job = next((r for r in report.probes if r.probe == "job" and r.facts is not None), None)
    if job is not None:
        parts.append(render_job_text(to_jsonable(job.facts)))
    cluster = next((r for r in report.probes if r.probe == "cluster" and r.facts), None)
    if cluster is not None:
        from .cluster_table import render_cluster_text  # multi-node runs only

        plan = next((r.facts for r in report.probes if r.probe == "plan" and r.facts), None)
        job_facts = to_jsonable(job.facts) if job is not None else None
        parts.append(
            render_cluster_text(
                to_jsonable(cluster.facts), job_facts, to_jsonable(plan) if plan else None
            )
        )
    dataparallel = next((r for r in report.probes if r.probe == "dataparallel" and r.facts), None)
    if dataparallel is not None:
        from .dataparallel_table import render_dataparallel_text  # `check` never needs it

        parts.append(render_dataparallel_text(dataparallel.facts))
    for severity in sorted(Severity, reverse=True):
        findings = [f for f in report.findings if f.severity is severity]
        if findings:
            parts.append(_severity_block(severity, findings, colour))
    if verbose:
        parts.extend(
            _facts_block(r) for r in report.probes if r.facts is not None and r.probe != "job"
        )
        if job is not None and job.facts.output_tail:
            parts.append("job output (end):\n" + _indent(job.facts.output_tail[-4000:]))
    parts.append(summary_line(report.findings))
    return "\n\n".join(parts) + "\n"


def summary_line(findings: Iterable[Finding]) -> str:
    counts = {severity: 0 for severity in Severity}
    for finding in findings:
        counts[finding.severity] += 1
    if not any(counts.values()):
        return "No problems found."
    words = [
        f"{counts[s]} {s.word}{'s' if counts[s] != 1 and s is not Severity.INFO else ''}"
        for s in sorted(Severity, reverse=True)
    ]
    return "Found " + ", ".join(words) + "."


def _probe_table(results: Iterable[ProbeResult]) -> str:
    rows = [
        (r.probe, r.status.value, f"{r.duration_s:.2f} s", _one_line(r.error or ""))
        for r in results
    ]
    return tabulate(rows, headers=("probe", "status", "time", "note"), tablefmt="plain")


def _severity_block(severity: Severity, findings: list[Finding], colour: bool) -> str:
    title = f"{severity.name} ({len(findings)})"
    lines = [click.style(title, fg=SEVERITY_COLOURS[severity], bold=True) if colour else title]
    for finding in findings:
        where = f"{finding.location}: " if finding.location else ""
        lines.append(f"  {finding.code} {finding.name}: {where}{finding.message}")
        if finding.fix:
            lines.append(f"    fix: {finding.fix.text}")
            lines.extend(f"      $ {command}" for command in finding.fix.commands)
    return "\n".join(lines)


def _facts_block(result: ProbeResult) -> str:
    facts = to_jsonable(result.facts)
    lines = [f"{result.probe} facts:"]
    lines.extend(f"  {key}: {_compact(value)}" for key, value in facts.items())
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip().splitlines())


def _compact(value: Any) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _one_line(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ
