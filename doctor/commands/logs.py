"""`ddp-doctor logs FILE|DIR|-`: diagnose the log of a run that already failed, or a folder of
logs and flight-recorder dumps."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import click

from ddp_doctor.cli import (
    EXIT_CODES_HELP,
    DoctorError,
    ReportOptions,
    finish,
    report_options,
)
from ddp_doctor.inputs import NotRegularFile, describe_size, open_regular
from ddp_doctor.logscan import LogScan, scan_stream
from ddp_doctor.logscan.compressed import compression_of
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus, make_report

if TYPE_CHECKING:
    from ddp_doctor.logscan.inputs import PathScan

STDIN = "-"
# Scanning is linear (4-400 MB/s here, by how many lines may match) and memory stays flat: the
# caps bound the time, and end an endless stdin. A plain file over its cap is read from the end,
# where a failed run's root cause is.
MAX_LOG_BYTES = 256 * 1024 * 1024  # stdin
MAX_FILE_LOG_BYTES = 4 * 1024**3  # a file (after gzip and UTF-16 decoding)


@click.command("logs", epilog=EXIT_CODES_HELP)
@click.argument("log", metavar="FILE|DIR|-")
@report_options()
def logs_command(
    log: str,
    report_options: ReportOptions,
) -> None:
    """Diagnose the log of a failed run: torchrun, NCCL_DEBUG and traceback output, a SLURM
    .out with ranks interleaved. FILE may be compressed (gzip, xz, bzip2, zstd) and in any
    encoding (UTF-8, UTF-16, or detected); - reads stdin.

    Every known problem is reported once, the root cause first (torchrun's "Root Cause"
    rank, then the first rank to fail, then the first error in time), with the line number
    and text that show it. A DIR is read whole: every log in it (one rank's log explains
    another's) and torch's flight-recorder dumps (TORCH_FR_DUMP_TEMP_FILE, one per rank,
    pickle or JSON), which name the collective some ranks entered and others never reached.
    FILE may be one such dump.
    """
    path = Path(log)
    name = _display_name(log)
    results: tuple[ProbeResult, ...] = ()
    if log != STDIN and path.is_dir():
        findings, subject, facts_read = _scan_folder(path)
        if report_options.verbose and facts_read:
            results = (_facts_read(facts_read),)
    elif log != STDIN and _is_dump(path):
        findings, subject = _scan_dump(path), f"the flight-recorder dump {name}"
    else:
        scan = _scan(log)
        _check_scanned(scan, name)
        findings = [*scan.findings, *_truncation(scan, log)]
        subject = f"{scan.lines} lines of {name}"
        if report_options.verbose and scan.facts_read:
            results = (_facts_read(scan.facts_read),)
    report = make_report(results, report_options.selector.filter(findings), subject)
    finish(report, report_options)


def _scan_folder(folder: Path) -> tuple[list[Finding], str, dict[str, int | str]]:
    from ddp_doctor.logscan.inputs import scan_folder

    name = _display_name(str(folder))
    try:
        scan = scan_folder(folder, MAX_LOG_BYTES)
    except PermissionError:
        raise DoctorError(f"cannot read {name}: permission denied") from None
    except OSError as error:
        raise DoctorError(f"cannot read {name}: {error.strerror or error}") from None
    if not scan.logs and not scan.dumps:
        raise DoctorError(f"the folder {name} holds no text logs or flight-recorder dumps")
    if sys.stderr.isatty():
        ranks = f" (ranks {_span(scan.ranks_compared)})" if scan.ranks_compared else ""
        skipped = f"; skipped {len(scan.skipped)} binary file(s)" if scan.skipped else ""
        click.echo(
            f"ddp-doctor: read {len(scan.logs)} log(s), {scan.lines} lines, and "
            f"{len(scan.dumps)} flight-recorder dump(s){ranks} from {name}{skipped}",
            err=True,
        )
    subject = (
        f"{scan.lines} lines of {len(scan.logs)} log(s) and {len(scan.dumps)} "
        f"flight-recorder dump(s) in {name}"
    )
    return [*scan.findings, *_not_read(scan, name)], subject, scan.facts_read


def _not_read(scan: PathScan, name: str) -> list[Finding]:
    """DDP907 for what the folder's limits left unread: never a silent skip."""
    from ddp_doctor.logscan.inputs import MAX_DEPTH, MAX_FILES
    from ddp_doctor.registry import Hit, spec_for

    parts = []
    if scan.files_past_limit:
        more = "more than " if scan.files_past_limit > MAX_FILES else ""
        parts.append(f"{more}{scan.files_past_limit} file(s) after the first {MAX_FILES:,}")
    if scan.folders_too_deep:
        parts.append(f"{scan.folders_too_deep} folder(s) deeper than {MAX_DEPTH} levels")
    if scan.logs_past_bytes:
        limit = describe_size(MAX_LOG_BYTES)
        parts.append(f"{scan.logs_past_bytes} log(s) after the first {limit} of text")
    if not parts:
        return []
    message = f"not read in {name}: {'; '.join(parts)}; a root cause there is not in this report"
    evidence = {
        "files_past_limit": scan.files_past_limit,
        "folders_too_deep": scan.folders_too_deep,
        "logs_past_bytes": scan.logs_past_bytes,
    }
    return [spec_for("DDP907").finding(Hit(message, evidence))]


def _is_dump(path: Path) -> bool:
    from ddp_doctor.flightrec.sniff import is_dump_file

    try:
        return path.is_file() and is_dump_file(path)
    except OSError:
        return False  # reading it as a log reports why it cannot be read


def _scan_dump(path: Path) -> list[Finding]:
    from ddp_doctor.flightrec.dumps import DumpError, read_dump
    from ddp_doctor.logscan.inputs import scan_dumps

    try:
        read_dump(path)
    except DumpError as error:
        raise DoctorError(
            f"cannot read {_display_name(str(path))} as a flight-recorder dump: {error}"
        ) from None
    return scan_dumps([path]).findings


def _span(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else str(ranks[0])


def _facts_read(facts_read: Mapping[str, int | str]) -> ProbeResult:
    """What the log said about the run (interfaces, variables, versions, connections), each
    with its line (file:line in a folder): -v shows it, as it shows a live run's facts."""
    from ddp_doctor.logscan.logfacts import FactsRead

    return ProbeResult("log", ProbeStatus.OK, FactsRead(dict(facts_read)), 0.0)


def _scan(log: str) -> LogScan:
    name = _display_name(log)
    try:
        with _opened(log) as (stream, skipped):
            limit = MAX_LOG_BYTES if log == STDIN else MAX_FILE_LOG_BYTES
            scan = scan_stream(stream, None if log == STDIN else log, limit)
            return dataclasses.replace(scan, skipped_bytes=skipped) if skipped else scan
    except FileNotFoundError:
        raise DoctorError(f"cannot read {name}: no such file") from None
    except NotRegularFile as error:
        if error.kind == "a folder":
            raise DoctorError(f"{name} is a folder; give the log file inside it") from None
        raise DoctorError(
            f"cannot read {name}: {error.strerror}; save the log to a file, or pipe it in with -"
        ) from None
    except PermissionError:
        raise DoctorError(f"cannot read {name}: permission denied") from None
    except EOFError:
        raise DoctorError(
            f"cannot read {name}: the compressed data ends early (truncated)"
        ) from None
    except ImportError as error:
        raise DoctorError(f"cannot read {name}: it needs the {error.name} package") from None
    except OSError as error:  # damaged gzip/xz/bzip2/zstd data (DecompressError), I/O errors
        raise DoctorError(f"cannot read {name}: {error.strerror or error}") from None


@contextmanager
def _opened(log: str) -> Iterator[tuple[BinaryIO, int]]:
    """The stream to scan, and how many bytes of the file's start it skips."""
    if log == STDIN:
        if sys.stdin.isatty():
            click.echo("ddp-doctor: reading the log from stdin (end with Ctrl-D)", err=True)
        yield sys.stdin.buffer, 0
        return
    with open_regular(log) as stream:
        yield stream, _skip_to_last_part(stream)


def _skip_to_last_part(stream: BinaryIO) -> int:
    """Over its cap, a plain file is read from its last MAX_FILE_LOG_BYTES on, at a line start;
    returns the bytes skipped (a compressed file is read from its start)."""
    size = os.fstat(stream.fileno()).st_size
    if size <= MAX_FILE_LOG_BYTES or compression_of(stream.read(10)) is not None:
        stream.seek(0)
        return 0
    from ddp_doctor.logscan.reader import skip_to_line_start
    from ddp_doctor.logscan.scanner import MAX_LINE_BYTES

    stream.seek(size - MAX_FILE_LOG_BYTES)
    skip_to_line_start(stream, MAX_LINE_BYTES)  # the rest of a cut line, never read whole
    return stream.tell()


def _check_scanned(scan: LogScan, name: str) -> None:
    """Input that cannot be a log stops here with one line; odd but usable input gets a note."""
    if scan.bytes == 0:
        raise DoctorError(f"{name} is empty: nothing to diagnose")
    if scan.looks_binary:
        raise DoctorError(
            f"{name} does not look like a text log (binary data in its first 64 KiB); "
            "give the run's stdout/stderr or SLURM .out file"
        )
    detected = scan.encoding.rsplit("+", 1)[-1]
    if detected not in ("utf-8", "utf-16"):
        click.echo(
            f"ddp-doctor: note: {name} is not valid UTF-8; read as {detected} (detected)",
            err=True,
        )
    elif scan.invalid_utf8:
        click.echo(
            f"ddp-doctor: note: {name} is not valid UTF-8; bytes that are not were read as "
            "replacement characters",
            err=True,
        )
    if sys.stderr.isatty():
        click.echo(f"ddp-doctor: read {scan.lines} lines ({scan.encoding}) from {name}", err=True)


def _truncation(scan: LogScan, log: str) -> list[Finding]:
    if not scan.truncated and not scan.skipped_bytes:
        return []
    from ddp_doctor.registry import Hit, spec_for

    cap = MAX_LOG_BYTES if log == STDIN else MAX_FILE_LOG_BYTES
    limit, name = describe_size(cap), _display_name(log)
    if scan.skipped_bytes:
        message = (
            f"only the last {limit} of {name} were read (line numbers count from there); a "
            f"root cause printed in its first {describe_size(scan.skipped_bytes)} is not in "
            "this report"
        )
    else:
        message = (
            f"only the first {limit} of {name} were read; a root cause printed later is not "
            "in this report"
        )
    evidence = {"bytes_read": scan.bytes, "limit_bytes": cap, "bytes_skipped": scan.skipped_bytes}
    return [spec_for("DDP907").finding(Hit(message, evidence))]


def _display_name(log: str) -> str:
    return "stdin" if log == STDIN else repr(log)
