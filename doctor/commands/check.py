"""`ddp-doctor check PATH...`: the static check of training scripts. Parse, call, print, exit."""

from __future__ import annotations

import sys

import click

from ddp_doctor import exitcodes
from ddp_doctor.cli import DoctorError, ReportOptions, emit, report_options
from ddp_doctor.model import Report

FORMATS = ("text", "table", "json", "sarif", "github")


@click.command(
    "check",
    epilog="Exit codes: 0 nothing at or above --fail-on; 1 findings at or "
    "above it; 2 usage error, or no file could be checked.",
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@report_options(FORMATS)
@click.option(
    "--exclude",
    multiple=True,
    metavar="PATTERN",
    help="Skip paths matching this gitignore-style pattern (repeatable).",
)
def check_command(
    paths: tuple[str, ...],
    report_options: ReportOptions,
    exclude: tuple[str, ...],
) -> None:
    """Find DDP and DataParallel mistakes in training scripts without running them.

    PATHS are files or folders (searched recursively): .py files are parsed; shell, YAML,
    Makefile and Markdown files are scanned for the deprecated launcher. Suppress a finding
    with `# ddp-doctor: ignore[CODE]` on its line; configure in [tool.ddp-doctor].
    """
    from ddp_doctor.model import make_report
    from ddp_doctor.script.config import ConfigError
    from ddp_doctor.script.runner import CheckOptions, check_paths

    chosen = report_options.selector
    try:
        outcome = check_paths(list(paths), CheckOptions(chosen.select, chosen.ignore, exclude))
    except ConfigError as error:
        raise DoctorError(str(error)) from None
    report = make_report((), outcome.findings)
    text = render_check(report, report_options, outcome.checked)
    emit(text, report_options.output, report_options.fmt, report_options.redact)
    if outcome.checked == 0:
        click.echo("ddp-doctor: error: no file could be checked", err=True)
        sys.exit(exitcodes.USAGE)
    sys.exit(report_options.exit_code(report))


def render_check(report: Report, options: ReportOptions, checked: int) -> str:
    """The report in any of check's formats; secrets out unless --no-redact."""
    fmt = options.fmt
    if fmt in ("text", "sarif", "github") and options.redact:
        from ddp_doctor.render import secrets_out

        report = secrets_out(report)
    if fmt in ("text", "table", "github"):
        report = _paths_shown_escaped(report)
    if fmt == "text":
        from ddp_doctor.render.text import render_text

        return render_text(report, checked_files=checked, verbose=options.verbose)
    if fmt == "sarif":
        from ddp_doctor.render.sarif import render_sarif

        return render_sarif(report)
    if fmt == "github":
        from ddp_doctor.render.github import render_github

        return render_github(report)
    from ddp_doctor.render import render

    return render(
        report,
        fmt,
        verbose=options.verbose,
        redact_hosts=options.redact_hosts,
        redact=options.redact,
    )


def _paths_shown_escaped(report: Report) -> Report:
    """File names on a terminal line, escaped: a newline or ESC in a name shows as text."""
    from dataclasses import replace

    from ddp_doctor.trust.inert import shown_path

    findings = tuple(
        replace(f, location=replace(f.location, path=shown_path(f.location.path)))
        if f.location is not None
        else f
        for f in report.findings
    )
    return replace(report, findings=findings)
