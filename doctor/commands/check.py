"""`ddp-doctor check PATH...`: the static check of training scripts. Parse, call, print, exit."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ddp_doctor import exitcodes
from ddp_doctor.cli import DoctorError, ReportOptions, emit, report_options
from ddp_doctor.model import Finding, Report
from ddp_doctor.render.text import plural

if TYPE_CHECKING:
    from ddp_doctor.script.fixes import FindingFix
    from ddp_doctor.script.runner import CheckOptions, CheckOutcome

FORMATS = ("text", "table", "json", "sarif", "github")


@click.command(
    "check",
    epilog="Exit codes: 0 nothing at or above --fail-on; 1 findings at or "
    "above it; 2 usage error, or no file could be checked.",
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@report_options(FORMATS, config_selects=False)
@click.option(
    "--exclude",
    multiple=True,
    metavar="PATTERN",
    help="Skip paths matching this gitignore-style pattern (repeatable).",
)
@click.option("--fix", is_flag=True, help="Apply the safe fixes to the files, then report.")
@click.option(
    "--unsafe-fixes",
    is_flag=True,
    help="With --fix or --diff, also the fixes that change behaviour.",
)
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff; change nothing.")
def check_command(
    paths: tuple[str, ...],
    report_options: ReportOptions,
    exclude: tuple[str, ...],
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
) -> None:
    """Find DDP and DataParallel mistakes in training scripts without running them.

    PATHS are files or folders (searched recursively): .py files and the code cells of .ipynb
    notebooks are parsed (a file named without a suffix too, when it parses); shell, YAML,
    Makefile and Markdown files are scanned for launch lines. Rank rules speak only where the
    program runs as several processes. Suppress a finding with `# ddp-doctor: ignore[CODE]` or
    `# noqa: CODE` on its line; configure in [tool.ddp-doctor].
    """
    from ddp_doctor.model import make_report
    from ddp_doctor.script.config import ConfigError
    from ddp_doctor.script.runner import CheckOptions, check_paths

    chosen = report_options.selector
    options = CheckOptions(chosen.select, chosen.ignore, exclude)
    try:
        outcome = check_paths(list(paths), options)
        if diff:
            sys.exit(_show_diff(outcome.findings, unsafe_fixes, report_options.redact))
        if fix:
            outcome = _apply_fixes(list(paths), options, outcome, unsafe_fixes)
    except ConfigError as error:
        raise DoctorError(str(error)) from None
    report = make_report((), outcome.findings)
    text = render_check(report, report_options, outcome.checked, unsafe_fixes)
    emit(text, report_options.output, report_options.fmt, report_options.redact)
    if outcome.checked == 0 and outcome.skipped:
        click.echo("ddp-doctor: error: no file could be checked", err=True)
        sys.exit(exitcodes.USAGE)
    if outcome.excluded:
        named = "1 file named" if outcome.excluded == 1 else f"{outcome.excluded} files named"
        click.echo(
            f"ddp-doctor: note: {named} on the command line left out: an exclude pattern "
            "matches (--exclude, the config's exclude or a .gitignore)",
            err=True,
        )
    if outcome.checked == 0 and not outcome.excluded:  # a folder of data or C++
        click.echo(
            "ddp-doctor: note: no Python, notebook, shell, YAML, Makefile or Markdown file "
            "under the paths given",
            err=True,
        )
    sys.exit(report_options.exit_code(report))


def _show_diff(findings: list[Finding], unsafe: bool, redact: bool) -> int:
    """Print what --fix would change; exit 1 when it would change something, as ruff does.
    Secrets in the shown lines are redacted (unless --no-redact) and control characters
    escaped, as in every other output."""
    from ddp_doctor.script.fixes import plan_fixes, visible

    planned = plan_fixes(findings, unsafe=unsafe)
    for fix in planned:
        text = fix.diff()
        if redact:
            from ddp_doctor.redact import Redactor

            text = Redactor().text(text)
        click.echo(visible(text), nl=False)
    count = sum(len(fix.fixed) for fix in planned)
    click.echo(f"Would fix {plural(count, 'finding')} in {plural(len(planned), 'file')}.", err=True)
    return 1 if planned else 0


def _sarif_fixes(report: Report, unsafe: bool, redact: bool) -> dict[int, FindingFix]:
    from dataclasses import replace

    from ddp_doctor.script.fixes import fixes_by_finding

    found = fixes_by_finding(report.findings, unsafe=unsafe)
    if not redact:
        return found
    from ddp_doctor.redact import Redactor

    redactor = Redactor()
    return {
        number: replace(
            fix,
            path=redactor.text(fix.path),
            replacements=tuple(replace(r, text=redactor.text(r.text)) for r in fix.replacements),
        )
        for number, fix in found.items()
    }


def _apply_fixes(
    paths: list[str], options: CheckOptions, outcome: CheckOutcome, unsafe: bool
) -> CheckOutcome:
    """Write the fixes and check again: the report shows what is left."""
    from ddp_doctor.script.fixes import plan_fixes, write_fixes
    from ddp_doctor.script.runner import check_paths

    planned = plan_fixes(outcome.findings, unsafe=unsafe)
    count = write_fixes(planned)
    if not planned:
        return outcome
    click.echo(f"Fixed {plural(count, 'finding')} in {plural(len(planned), 'file')}.", err=True)
    return check_paths(paths, options)


def render_check(
    report: Report, options: ReportOptions, checked: int, unsafe_fixes: bool = False
) -> str:
    """The report in any of check's formats; secrets out unless --no-redact. SARIF carries
    each fixable finding's fix (the unsafe ones too with --unsafe-fixes)."""
    fmt = options.fmt
    fixes = _sarif_fixes(report, unsafe_fixes, options.redact) if fmt == "sarif" else {}
    if fmt in ("text", "table", "sarif", "github") and options.redact:
        from ddp_doctor.render import secrets_out

        report = secrets_out(report)
    if fmt in ("text", "table", "github"):
        report = _paths_shown_escaped(report)
    if fmt == "text":
        from ddp_doctor.render.text import render_text

        return render_text(report, checked_files=checked, verbose=options.verbose)
    if fmt == "table":
        from ddp_doctor.render.text import render_findings_table

        return render_findings_table(report, checked_files=checked)
    if fmt == "sarif":
        from ddp_doctor.render.sarif import render_sarif

        return render_sarif(report, fixes)
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
