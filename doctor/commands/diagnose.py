"""`diagnose REPORT.json`: judge a saved report's facts again, without probing."""

from __future__ import annotations

from pathlib import Path

import click

from ddp_doctor.cli import DoctorError, ReportOptions, finish, report_options
from ddp_doctor.judge import judge
from ddp_doctor.model import make_report
from ddp_doctor.report_io import ReportError, load_report


@click.command("diagnose")
@click.argument("report_file", type=click.Path(path_type=Path, dir_okay=False))
@report_options()
def diagnose_command(
    report_file: Path,
    report_options: ReportOptions,
) -> None:
    """Re-judge the facts of a JSON report (from `run --format json`) with this version's rules."""
    try:
        saved = load_report(report_file)
    except ReportError as error:
        raise DoctorError(str(error)) from None
    report = make_report(saved.probes, judge(saved.probes, report_options.selector))
    finish(report, report_options)
