"""`ddp-doctor logs FILE|-`: diagnose the log of a run that already failed."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import click

from ddp_doctor.cli import (
    EXIT_CODES_HELP,
    DoctorError,
    ReportOptions,
    finish,
    report_options,
)
from ddp_doctor.logscan import LogScan, scan_stream
from ddp_doctor.model import make_report

STDIN = "-"


@click.command("logs", epilog=EXIT_CODES_HELP)
@click.argument("log", metavar="FILE|-")
@report_options()
def logs_command(
    log: str,
    report_options: ReportOptions,
) -> None:
    """Diagnose the log of a failed run: torchrun, NCCL_DEBUG and traceback output, a SLURM
    .out with ranks interleaved. FILE may be gzipped; - reads stdin.

    Every known problem is reported once, the root cause first (torchrun's "Root Cause"
    rank, then the first rank to fail, then the first error in time), with the line number
    and text that show it.
    """
    scan = _scan(log)
    _check_scanned(scan, _display_name(log))
    subject = f"{scan.lines} lines of {_display_name(log)}"
    report = make_report((), report_options.selector.filter(scan.findings), subject)
    finish(report, report_options)


def _scan(log: str) -> LogScan:
    name = _display_name(log)
    try:
        with _opened(log) as stream:
            return scan_stream(stream, source=None if log == STDIN else log)
    except FileNotFoundError:
        raise DoctorError(f"cannot read {name}: no such file") from None
    except IsADirectoryError:
        raise DoctorError(f"{name} is a folder; give the log file inside it") from None
    except PermissionError:
        raise DoctorError(f"cannot read {name}: permission denied") from None
    except EOFError:
        raise DoctorError(f"cannot read {name}: the gzip data ends early (truncated)") from None
    except OSError as error:  # gzip.BadGzipFile, I/O errors
        raise DoctorError(f"cannot read {name}: {error.strerror or error}") from None


@contextmanager
def _opened(log: str) -> Iterator[BinaryIO]:
    if log == STDIN:
        if sys.stdin.isatty():
            click.echo("ddp-doctor: reading the log from stdin (end with Ctrl-D)", err=True)
        yield sys.stdin.buffer
        return
    if Path(log).is_dir():
        raise IsADirectoryError(log)
    with open(log, "rb") as stream:
        yield stream


def _check_scanned(scan: LogScan, name: str) -> None:
    """Input that cannot be a log stops here with one line; odd but usable input gets a note."""
    if scan.bytes == 0:
        raise DoctorError(f"{name} is empty: nothing to diagnose")
    if scan.looks_binary:
        raise DoctorError(
            f"{name} does not look like a text log (binary data in its first 64 KiB); "
            "give the run's stdout/stderr or SLURM .out file"
        )
    if scan.invalid_utf8:
        click.echo(
            f"ddp-doctor: note: {name} is not valid UTF-8; bytes that are not were read as "
            "replacement characters",
            err=True,
        )
    if sys.stderr.isatty():
        click.echo(f"ddp-doctor: read {scan.lines} lines ({scan.encoding}) from {name}", err=True)


def _display_name(log: str) -> str:
    return "stdin" if log == STDIN else repr(log)
