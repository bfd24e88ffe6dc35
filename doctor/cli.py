"""The command line: the group, shared report options and exit handling; commands in commands/.

Nothing here imports torch: `--help`, `--version`, `explain`, `rules` and `check` stay fast.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from ddp_doctor import __version__, exitcodes
from ddp_doctor.trust.output import check_output_writable, emit

if TYPE_CHECKING:  # imported where used: `--help` needs neither
    from ddp_doctor.model import Report
    from ddp_doctor.registry import Selector

REPORT_FORMATS = ("table", "json", "markdown")
EXIT_CODES_HELP = (
    "Exit codes: 0 nothing at or above --fail-on; 1 findings at or above --fail-on; "
    "2 usage error or the doctor could not run; 128+N stopped by signal N (SIGHUP 129, "
    "SIGINT 130, SIGQUIT 131, SIGTERM 143)."
)


class LazyCommand(NamedTuple):
    """A command in its own module, imported only when it runs (`--help` imports none)."""

    module: str
    attribute: str
    summary: str  # the group's --help line; a test keeps it equal to the command's own


# Every command; `--help` lists them from here without importing a single one.
COMMANDS = {
    "attach": LazyCommand("attach", "attach_command", "Diagnose a job that runs (or hangs) now."),
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


class OneLineUsageError(click.UsageError):
    """A usage error as one line on stderr, as the README promises (click prints three)."""

    def show(self, file: Any = None) -> None:
        message = " ".join(self.format_message().split())
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        _say(f"ddp-doctor: error: {message}{hint}")


def _one_line(error: click.UsageError) -> click.UsageError:
    if isinstance(error, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return error  # a bare `ddp-doctor` prints its help
    return OneLineUsageError(error.format_message(), error.ctx)


class DoctorGroup(click.Group):
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as error:
            raise _one_line(error) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _one_line(error) from None

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


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}  # every command inherits them


@click.group(cls=DoctorGroup, epilog=EXIT_CODES_HELP, context_settings=HELP_OPTIONS)
@click.version_option(__version__, prog_name="ddp-doctor")
def cli() -> None:
    """Diagnose multi-GPU and multi-node PyTorch training that will not start, hangs, or runs
    wrong. Every finding has a code, a severity and a fix."""


# Options shared by the commands that print a report.
def report_options(
    formats: Sequence[str] = REPORT_FORMATS, config_selects: bool = True
) -> Callable[[Callable], Callable]:
    """`config_selects`: select and ignore default to [tool.ddp-doctor]'s (check applies them
    per file itself)."""
    shareable = [name for name in formats if name in ("json", "markdown")]  # where hosts go

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
                help="Also replace host names and IP addresses in "
                f"{' and '.join(shareable)} output.",
            ),
            click.option(
                "--no-redact",
                is_flag=True,
                help="Show secrets (tokens, passwords, credentials in URLs) as they are, in "
                "every format. Never share such output.",
            ),
        ]

        @functools.wraps(command)
        def with_report_options(*args: Any, **kwargs: Any) -> Any:
            from ddp_doctor.cli_config import ConfigError, apply_config_defaults

            try:
                apply_config_defaults(kwargs, formats, config_selects)
            except ConfigError as error:
                raise DoctorError(str(error)) from None
            chosen = ReportOptions(
                fmt=kwargs.pop("fmt"),
                output=kwargs.pop("output"),
                fail_on=kwargs.pop("fail_on"),
                selector=make_selector(kwargs.pop("select"), kwargs.pop("ignore")),
                verbose=kwargs.pop("verbose"),
                redact_hosts=kwargs.pop("redact_hosts"),
                redact=not kwargs.pop("no_redact"),
            )
            if chosen.redact_hosts and not chosen.redact:
                raise click.UsageError("--redact-hosts and --no-redact contradict each other")
            # before any work that could not be saved; never onto one of the inputs
            check_output_writable(chosen.output, inputs=kwargs.values())
            return command(*args, report_options=chosen, **kwargs)

        for option in reversed(options):
            with_report_options = option(with_report_options)
        return with_report_options

    return decorate


class ReportOptions(NamedTuple):
    """The shared output options, parsed and checked, as one value for the command."""

    fmt: str
    output: Path | None
    fail_on: str
    selector: Selector
    verbose: bool
    redact_hosts: bool
    redact: bool = True  # secrets out of every format; False only with --no-redact

    def fails(self, report: Report) -> bool:
        from ddp_doctor.model import Severity

        return report.fails_at(Severity.from_word(self.fail_on))

    def exit_code(self, report: Report) -> int:
        if any(finding.code in exitcodes.COULD_NOT_RUN for finding in report.findings):
            return exitcodes.USAGE
        return exitcodes.FINDINGS if self.fails(report) else exitcodes.OK


def make_selector(select: Sequence[str], ignore: Sequence[str]) -> Selector:
    from ddp_doctor.registry import Selector, UnknownSelector

    try:
        return Selector.parse(select, ignore)
    except UnknownSelector as error:
        raise click.BadParameter(str(error), param_hint="--select/--ignore") from None


def finish(report: Report, options: ReportOptions) -> None:
    """Renders, writes, and exits with the documented code."""
    import dataclasses

    from ddp_doctor.render import render

    if report.command is None and report.rejudged is None and INVOCATION:
        report = dataclasses.replace(report, command=INVOCATION[0])

    text = render(
        report,
        options.fmt,
        verbose=options.verbose,
        redact_hosts=options.redact_hosts,
        redact=options.redact,
    )
    emit(text, options.output, options.fmt, options.redact)
    sys.exit(options.exit_code(report))


class DoctorError(click.ClickException):
    """The doctor could not do its work: printed as one line, exit 2."""

    exit_code = exitcodes.USAGE

    def show(self, file: Any = None) -> None:
        _say(f"ddp-doctor: error: {self.message}")


# The command line of this process, as the reader of a report needs it (set by main()).
INVOCATION: list[str] = []


def main(argv: Sequence[str] | None = None) -> None:
    import shlex

    from ddp_doctor.trust.streams import guard_standard_streams

    guard_standard_streams()  # before anything could open a file onto a closed descriptor
    args = list(argv) if argv is not None else sys.argv[1:]
    INVOCATION[:] = [shlex.join(["ddp-doctor", *args])]
    _stop_on_signals()
    try:
        returned = cli.main(
            args=args,
            prog_name="ddp-doctor",
            standalone_mode=False,
        )
    except Stopped as stop:
        _exit_stopped(stop.signum)
    except (click.Abort, KeyboardInterrupt):  # SIGINT before the handler was in place
        _exit_stopped(signal.SIGINT)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (RecursionError, MemoryError) as error:
        _stop_children()
        _say(f"ddp-doctor: error: the input is too deeply nested or too large ({_what(error)})")
        sys.exit(exitcodes.USAGE)
    except OSError as error:
        _stop_children()
        sys.exit(_os_error_exit(error))
    except RuntimeError as error:
        _stop_children()
        if "can't start new thread" not in str(error):
            _say(f"ddp-doctor: internal error: {type(error).__name__}: {error}")
        else:
            _say("ddp-doctor: error: no thread could be started (a process limit: ulimit -u)")
        sys.exit(exitcodes.USAGE)
    except Exception as error:  # the last guard: one line, never a traceback
        _stop_children()
        _say(f"ddp-doctor: internal error: {type(error).__name__}: {error}")
        sys.exit(exitcodes.USAGE)
    sys.exit(returned if isinstance(returned, int) else exitcodes.OK)


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, so that no `except Exception` on the way up
    swallows it, while every `finally` still runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_stopping: list[int] = []


def _stop_on_signals() -> None:
    """A closed terminal (SIGHUP), Ctrl-C (SIGINT), Ctrl-\\ (SIGQUIT), `timeout` and batch
    schedulers (SIGTERM) all stop the doctor the same way: the job and its files go, and the
    exit code is 128 + the signal's number. A second signal while stopping is ignored."""

    def stop(signum: int, frame: object) -> None:
        if _stopping:
            return
        _stopping.append(signum)
        raise Stopped(signum)

    for signum in exitcodes.STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(signum, stop)


def _exit_stopped(signum: int) -> None:
    _stop_children()
    _say(f"ddp-doctor: stopped by {signal.Signals(signum).name}; nothing it started is left")
    sys.exit(exitcodes.stopped_by(signum))


def _say(line: str) -> None:
    """One line on stderr, if stderr is still there (a closed terminal is not), with nothing
    of an input's control characters or undecodable bytes in it."""
    from ddp_doctor.trust.inert import escape_controls

    text = escape_controls(" ".join(line.split("\n")))
    with contextlib.suppress(OSError, ValueError):
        click.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"), err=True)


def _what(error: BaseException) -> str:
    return type(error).__name__


def _os_error_exit(error: OSError) -> int:
    """A reader that went away (`| head`) ends the output as for any Unix tool: exit 0. A full
    disk, a vanished working folder, no threads or processes: one line, exit 2."""
    from ddp_doctor.trust.streams import is_reader_gone, silence_stdout

    if is_reader_gone(error):
        silence_stdout()
        return exitcodes.OK
    why = error.strerror or str(error)
    if isinstance(error, FileNotFoundError) and not _cwd_exists():
        why = "the current folder no longer exists"
    _say(f"ddp-doctor: error: {why}")
    return exitcodes.USAGE


def _cwd_exists() -> bool:
    try:
        os.getcwd()
    except OSError:
        return False
    return True


def _stop_children() -> None:
    from ddp_doctor.probes.runner import stop_everything

    stop_everything()
