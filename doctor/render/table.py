"""The terminal report: probes with status and time, then findings by severity, fix below."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import click

from ddp_doctor.model import Finding, ProbeResult, Report, Severity
from ddp_doctor.render.columns import plain_table
from ddp_doctor.render.facts_text import compact_facts, evidence_line, header_rows, one_line

NOTE_CHARS = 100  # a probe's note in the probe table
SEVERITY_COLOURS = {Severity.ERROR: "red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render_table(report: Report, verbose: bool = False, colour: bool | None = None) -> str:
    colour = _use_colour() if colour is None else colour
    parts = [title_lines(report)]
    if report.probes:
        parts.append(_probe_table(report.probes))
    job = next((r for r in report.probes if r.probe == "job" and r.facts is not None), None)
    if job is not None:
        from ddp_doctor.codec import to_jsonable
        from ddp_doctor.facts.machine import FactSet
        from ddp_doctor.readings.expected_busbw import bandwidth_tables
        from ddp_doctor.render.job_tables import render_job_text  # only where a job ran

        tables = bandwidth_tables(FactSet.of(report.probes))
        parts.append(render_job_text(to_jsonable(job.facts), tables))
    cluster = next((r for r in report.probes if r.probe == "cluster" and r.facts), None)
    if cluster is not None:
        from ddp_doctor.codec import to_jsonable
        from ddp_doctor.render.cluster_table import render_cluster_text  # multi-node runs only

        plan = next((r.facts for r in report.probes if r.probe == "plan" and r.facts), None)
        job_facts = to_jsonable(job.facts) if job is not None else None
        parts.append(
            render_cluster_text(
                to_jsonable(cluster.facts), job_facts, to_jsonable(plan) if plan else None
            )
        )
    trace = next((r for r in report.probes if r.probe == "trace" and r.facts is not None), None)
    if trace is not None:
        from ddp_doctor.codec import to_jsonable
        from ddp_doctor.render.trace_tables import render_trace_text  # only `trace` reports need it

        parts.append(render_trace_text(to_jsonable(trace.facts)))
    attached = next((r for r in report.probes if r.probe == "attach" and r.facts), None)
    if attached is not None:
        from ddp_doctor.codec import to_jsonable
        from ddp_doctor.render.attach_table import render_attach_text  # only `attach` reports

        parts.append(render_attach_text(to_jsonable(attached.facts)))
    dataparallel = next((r for r in report.probes if r.probe == "dataparallel" and r.facts), None)
    if dataparallel is not None:
        from ddp_doctor.render.dataparallel_table import (
            render_dataparallel_text,  # `check` never needs it
        )

        parts.append(render_dataparallel_text(dataparallel.facts))
    for severity in sorted(Severity, reverse=True):
        findings = [f for f in report.findings if f.severity is severity]
        if findings:
            parts.append(_severity_block(severity, findings, colour))
    if verbose:
        parts.append(_header(report))
        blocks = (
            _facts_block(r)
            for r in report.probes
            if r.facts and r.probe not in ("job", "trace", "attach")
        )
        parts.extend(block for block in blocks if block)
        for run, title in ((job, "job output (end)"), (trace, "output of the traced run (end)")):
            if run is not None and run.facts.output_tail:
                parts.append(f"{title}:\n" + _indent(run.facts.output_tail[-4000:]))
    parts.append(summary_line(report.findings) if report.findings else report.nothing_found)
    return "\n\n".join(parts) + "\n"


def title_lines(report: Report) -> str:
    """Who made the report and when, the Python it examined and why; a re-judged report also
    names its command and the re-judging."""
    lines = [f"ddp-doctor {report.tool_version}  {report.created}"]
    if report.rejudged is not None:
        rejudged = report.rejudged
        lines.append(f"  command: {report.command or '(not recorded)'}")
        lines.append(f"  re-judged by ddp-doctor {rejudged.tool_version} on {rejudged.created}")
    python = report.probe("python")
    if python is not None and python.facts is not None:
        facts = python.facts
        lines.append(f"  python examined: {facts.executable} (chosen because: {facts.chosen_by})")
    return "\n".join(lines)


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
        (r.probe, r.status.value, f"{r.duration_s:.2f} s", one_line(r.error or "", NOTE_CHARS))
        for r in results
    ]
    return plain_table(rows, ("probe", "status", "time", "note"), right=(2,))


def _severity_block(severity: Severity, findings: list[Finding], colour: bool) -> str:
    title = f"{severity.name} ({len(findings)})"
    lines = [click.style(title, fg=SEVERITY_COLOURS[severity], bold=True) if colour else title]
    for finding in findings:
        where = f"{finding.location}: " if finding.location else ""
        lines.append(f"  {finding.code} {finding.name}: {where}{finding.message}")
        evidence = evidence_line(finding.evidence)
        if evidence:
            lines.append(f"    evidence: {evidence}")
        if finding.fix:
            lines.append(f"    fix: {finding.fix.text}")
            lines.extend(f"      $ {command}" for command in finding.fix.commands)
    return "\n".join(lines)


def _facts_block(result: ProbeResult) -> str:
    from ddp_doctor.codec import to_jsonable

    body = compact_facts(to_jsonable(result.facts), "  ")
    return f"{result.probe} facts:\n{body}" if body else ""


def _header(report: Report) -> str:
    from ddp_doctor.report_io import report_to_json

    rows = header_rows(report_to_json(report))
    return "\n".join(f"{name}: {value.replace('`', '')}" for name, value in rows)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip().splitlines())


def _use_colour() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ
