"""The command line: the group, shared report options and exit handling; commands in commands/.

Nothing here imports torch: `--help`, `--version`, `explain`, `rules` and `check` stay fast.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from . import __version__, exitcodes
from .model import Report, Severity
from .registry import Selector, UnknownSelector

REPORT_FORMATS = ("table", "json", "markdown")
EXIT_CODES_HELP = (
    "Exit codes: 0 nothing at or above --fail-on; 1 findings at or above --fail-on; "
    "2 usage error or the doctor could not run."
)


@dataclass(frozen=True)
class LazyCommand:
    """A command in its own module, imported only when it runs (`--help` imports none)."""

    module: str
    attribute: str
    summary: str  # the group's --help line; a test keeps it equal to the command's own


# Every command; `--help` lists them from here without importing a single one.
COMMANDS = {
    "check": LazyCommand("check", "check_command", "Read training scripts for DDP mistakes."),
    "diagnose": LazyCommand("diagnose", "diagnose_command", "Judge a saved JSON report again."),
    "explain": LazyCommand("explain", "explain_command", "Explain one rule."),
    "logs": LazyCommand("logs", "logs_command", "Name the root cause in a failed run's log."),
    "rules": LazyCommand("explain", "rules_command", "List every rule."),
    "run": LazyCommand("run", "run_command", "Probe this machine and launch a small job."),
    "trace": LazyCommand(
        "trace", "trace_command", "Run your training under a monitor; find hangs."
    ),
}


class DoctorGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        lazy = COMMANDS.get(name)
        if lazy is None:
            return None
        module = importlib.import_module(f"ddp_doctor.commands.{lazy.module}")
        return getattr(module, lazy.attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name].summary) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=DoctorGroup, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="ddp-doctor")
def cli() -> None:
    """Diagnose multi-GPU and multi-node PyTorch training that will not start, hangs, or runs
    wrong. Every finding has a code, a severity and a fix."""


# Options shared by the commands that print a report.
def report_options(formats: Sequence[str] = REPORT_FORMATS) -> Callable[[Callable], Callable]:
    def decorate(command: Callable) -> Callable:
        options = [
            click.option(
                "--format",
                "fmt",
                type=click.Choice(formats),
                default=formats[0],
                show_default=True,
                help="Output format.",
            ),
            click.option(
                "--output",
                "-o",
                type=click.Path(dir_okay=False, path_type=Path),
                help="Write the report to FILE instead of stdout.",
            ),
            click.option(
                "--fail-on",
                type=click.Choice(["info", "warning", "error"]),
                default="error",
                show_default=True,
                help="Exit 1 when a finding is at or above this severity.",
            ),
            click.option("--select", multiple=True, help="Only these codes, prefixes or names."),
            click.option("--ignore", multiple=True, help="Drop these codes, prefixes or names."),
            click.option("-v", "--verbose", is_flag=True, help="Show the facts behind findings."),
            click.option(
                "--redact-hosts",
                is_flag=True,
                help="Also replace host names and IP addresses in json and markdown output.",
            ),
        ]

        @functools.wraps(command)
        def with_report_options(*args: Any, **kwargs: Any) -> Any:
            chosen = ReportOptions(
                fmt=kwargs.pop("fmt"),
                output=kwargs.pop("output"),
                fail_on=kwargs.pop("fail_on"),
                selector=make_selector(kwargs.pop("select"), kwargs.pop("ignore")),
                verbose=kwargs.pop("verbose"),
                redact_hosts=kwargs.pop("redact_hosts"),
            )
            check_output_writable(chosen.output)  # before any work that could not be saved
            return command(*args, report_options=chosen, **kwargs)

        for option in reversed(options):
            with_report_options = option(with_report_options)
        return with_report_options

    return decorate


@dataclass(frozen=True)
class ReportOptions:
    """The shared output options, parsed and checked, as one value for the command."""

    fmt: str
    output: Path | None
    fail_on: str
    selector: Selector
    verbose: bool
    redact_hosts: bool

    def fails(self, report: Report) -> bool:
        return report.fails_at(Severity.from_word(self.fail_on))


def make_selector(select: Sequence[str], ignore: Sequence[str]) -> Selector:
    try:
        return Selector.parse(select, ignore)
    except UnknownSelector as error:
        raise click.BadParameter(str(error), param_hint="--select/--ignore") from None


def check_output_writable(output: Path | None) -> None:
    """Fails before any probing when the report could not be written anyway."""
    if output is None:
        return
    parent = output.parent if str(output.parent) else Path(".")
    if not parent.is_dir():
        raise click.BadParameter(f"folder {str(parent)!r} does not exist", param_hint="--output")
    if output.is_dir() or (output.exists() and not _writable(output)) or not _writable(parent):
        raise click.BadParameter(f"cannot write to {str(output)!r}", param_hint="--output")


def _writable(path: Path) -> bool:
    import os

    return os.access(path, os.W_OK)


def emit(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as error:
        raise DoctorError(f"cannot write {str(output)!r}: {error.strerror or error}") from None
    click.echo(f"report written to {output}", err=True)


def finish(report: Report, options: ReportOptions) -> None:
    """Renders, writes, and exits with the documented code."""
    from .render import render

    text = render(report, options.fmt, verbose=options.verbose, redact_hosts=options.redact_hosts)
    emit(text, options.output)
    sys.exit(exitcodes.FINDINGS if options.fails(report) else exitcodes.OK)


class DoctorError(click.ClickException):
    """The doctor could not do its work: printed as one line, exit 2."""

    exit_code = exitcodes.USAGE

    def show(self, file: Any = None) -> None:
        click.echo(f"ddp-doctor: error: {self.message}", err=True)


def main(argv: Sequence[str] | None = None) -> None:
    _interrupt_on_sigterm()
    try:
        returned = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="ddp-doctor",
            standalone_mode=False,
        )
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (click.Abort, KeyboardInterrupt):
        _stop_children()
        click.echo("ddp-doctor: interrupted; the job and its files were removed", err=True)
        sys.exit(INTERRUPTED)
    except Exception as error:  # the last guard: one line, never a traceback
        _stop_children()
        click.echo(f"ddp-doctor: internal error: {type(error).__name__}: {error}", err=True)
        sys.exit(exitcodes.USAGE)
    sys.exit(returned if isinstance(returned, int) else exitcodes.OK)


INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _interrupt_on_sigterm() -> None:
    """`timeout` and batch schedulers stop with SIGTERM: clean up as for Ctrl-C."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError, AttributeError):  # not the main thread; no SIGTERM
        signal.signal(signal.SIGTERM, interrupt)


def _stop_children() -> None:
    from ddp_doctor.probes.runner import stop_everything

    stop_everything()
