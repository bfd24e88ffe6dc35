"""`diagnose REPORT.json [MORE.json ...]`: judge a saved report's facts again, without probing;
several `attach` reports (one per node) are merged into one job first.

The report keeps what a maintainer needs to trust it: the command that made it, when, on which
host (its facts) and with which ddp-doctor; the re-judging adds its own version, date and command.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from ddp_doctor import __version__
from ddp_doctor.cli import INVOCATION, DoctorError, ReportOptions, finish, report_options
from ddp_doctor.engine import cut_by_time_limit
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus, Rejudged, Report, now_utc
from ddp_doctor.report_io import ReportError, load_report


@click.command("diagnose")
@click.argument(
    "report_files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False)
)
@report_options()
def diagnose_command(
    report_files: tuple[Path, ...],
    report_options: ReportOptions,
) -> None:
    """Re-judge the facts of a JSON report (from `run`, `trace` or `attach --format json`) with
    this version's rules; the report keeps its command, date, host and version. Several
    `attach --format json` reports of one job's nodes are judged as one job."""
    try:
        saved = [load_report(path) for path in report_files]
    except ReportError as error:
        raise DoctorError(str(error)) from None
    if len(saved) > 1:  # one job's nodes, attached apart: node 0's report carries them all
        saved = [replace(saved[0], probes=merged_attach_probes(saved, report_files))]
    finish(rejudge(saved[0], report_options), report_options)


def merged_attach_probes(saved: list[Report], paths: tuple[Path, ...]) -> tuple[ProbeResult, ...]:
    """attach's part: every report must be an attach report; their ranks become one job."""
    from ddp_doctor.attach.merge import MergeError, merge_nodes

    facts = []
    for report, path in zip(saved, paths, strict=True):
        attached = next((p.facts for p in report.probes if p.probe == "attach" and p.facts), None)
        if attached is None:
            raise DoctorError(f"{path} is not an `attach` report: only those are merged")
        facts.append(attached)
    try:
        merged = merge_nodes(facts)
    except MergeError as error:
        raise DoctorError(str(error)) from None
    return (ProbeResult("attach", ProbeStatus.OK, merged, merged.duration_s),)


def rejudge(saved: Report, options: ReportOptions) -> Report:
    """The saved report with this version's findings, its own command, date and version kept."""
    probes = tuple(_status_now(result) for result in saved.probes)
    findings = tuple(judge(probes, options.selector))
    rejudged = Rejudged(__version__, now_utc(), INVOCATION[0] if INVOCATION else None)
    return replace(saved, probes=probes, findings=findings, rejudged=rejudged)


def _status_now(result: ProbeResult) -> ProbeResult:
    """A job cut at --timeout that an older version saved as ok is timed-out, as now."""
    if result.status is ProbeStatus.OK and cut_by_time_limit(result.facts):
        return replace(result, status=ProbeStatus.TIMED_OUT, error="cut at its time limit")
    return result
