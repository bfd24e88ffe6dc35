"""`diagnose REPORT.json`: judge a saved report's facts again, without probing.

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
@click.argument("report_file", type=click.Path(path_type=Path, dir_okay=False))
@report_options()
def diagnose_command(
    report_file: Path,
    report_options: ReportOptions,
) -> None:
    """Re-judge the facts of a JSON report (from `run` or `trace --format json`) with this
    version's rules; the report keeps its command, date, host and version."""
    try:
        saved = load_report(report_file)
    except ReportError as error:
        raise DoctorError(str(error)) from None
    finish(rejudge(saved, report_options), report_options)


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
