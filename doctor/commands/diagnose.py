"""`diagnose REPORT.json [MORE.json ...]`: judge a saved report's facts again, without probing;
several `attach` reports (one per node) are merged into one job first."""

from __future__ import annotations

from pathlib import Path

import click

from ddp_doctor.cli import DoctorError, ReportOptions, finish, report_options
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, make_report
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
    """Re-judge the facts of a JSON report (from `run --format json`) with this version's rules;
    several `attach --format json` reports of one job's nodes are judged as one job."""
    try:
        saved = [load_report(path) for path in report_files]
    except ReportError as error:
        raise DoctorError(str(error)) from None
    probes = saved[0].probes if len(saved) == 1 else merged_attach_probes(saved, report_files)
    report = make_report(probes, judge(probes, report_options.selector))
    finish(report, report_options)


def merged_attach_probes(saved: list, paths: tuple[Path, ...]) -> tuple[ProbeResult, ...]:
    """attach's part: every report must be an attach report; their ranks become one job."""
    from ddp_doctor.attach.merge import MergeError, merge_nodes
    from ddp_doctor.model import ProbeStatus

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
