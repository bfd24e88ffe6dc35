"""`diagnose REPORT.json`: judge a saved report's facts again, without probing."""

from __future__ import annotations

from pathlib import Path

import click

from ddp_doctor.cli import DoctorError, check_output_writable, finish, make_selector, report_options
from ddp_doctor.engine import judge, make_report
from ddp_doctor.report_io import ReportError, load_report


@click.command("diagnose")
@click.argument("report_file", type=click.Path(path_type=Path, dir_okay=False))
@report_options()
def diagnose_command(
    report_file: Path,
    fmt: str,
    output: Path | None,
    fail_on: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    verbose: bool,
    redact_hosts: bool,
) -> None:
    """Re-judge the facts of a JSON report (from `run --format json`) with this version's rules."""
    selector = make_selector(select, ignore)
    check_output_writable(output)
    try:
        saved = load_report(report_file)
    except ReportError as error:
        raise DoctorError(str(error)) from None
    report = make_report(saved.probes, judge(saved.probes, selector))
    finish(report, fmt, output, fail_on, verbose=verbose, redact_hosts=redact_hosts)
