"""What `ddp-doctor logs PATH` reads when PATH is a folder or a flight-recorder dump.

A folder (torchrun's --log-dir, a SLURM output folder, a copy of the dumps) is walked: text
logs are read into one scanner, so what one rank's log shows explains another's; files that
look like flight-recorder dumps are compared rank by rank; anything binary is skipped.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ddp_doctor.flightrec.record import FlightRecord, read_flight_record
from ddp_doctor.flightrec.sniff import looks_like_dump
from ddp_doctor.inputs import open_regular
from ddp_doctor.logscan.pattern import Role
from ddp_doctor.logscan.rankfiles import speakers
from ddp_doctor.logscan.reader import SAMPLE_BYTES, looks_binary, read_into
from ddp_doctor.logscan.scanner import LogScanner
from ddp_doctor.model import Finding

MAX_FILES = 10_000
MAX_DEPTH = 8
MAX_ALSO = 8
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class PathScan:
    findings: list[Finding] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    dumps: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # binary or unreadable files
    # What the limits kept from being read at all (reported as DDP907, never silently):
    files_past_limit: int = 0  # files after the MAX_FILES-th
    folders_too_deep: int = 0  # folders below MAX_DEPTH levels
    logs_past_bytes: int = 0  # logs not read once max_bytes of text were
    bytes: int = 0
    lines: int = 0
    ranks_compared: list[int] = field(default_factory=list)
    facts_read: dict[str, int | str] = field(default_factory=dict)  # fact -> "file:line"


def scan_folder(folder: Path, max_bytes: int | None = None) -> PathScan:
    """Reads every log and dump below folder, the logs to `max_bytes` of text in all; raises
    OSError when the folder cannot be listed."""
    result = PathScan()
    logs, dumps = _sort_files(folder, result)
    scanner = LogScanner()
    writers = speakers(logs)  # the rank each per-rank file is of (rankfiles.py)
    for path in logs:
        try:
            with open_regular(path) as stream:
                scanner.next_file(str(path), writers.get(path))
                read = read_into(scanner, stream, max_bytes)
            result.logs.append(str(path))
            if read.truncated:
                result.logs_past_bytes = len(logs) - logs.index(path) - 1
                break
        except (OSError, EOFError):
            result.skipped.append(str(path))
    log_results = scanner.results() if result.logs else []
    record = read_flight_record(dumps) if dumps else None
    result.findings = _merge(log_results, record)
    result.dumps = [str(p) for p in dumps]
    result.bytes, result.lines = scanner.stats.bytes, scanner.stats.lines
    result.ranks_compared = record.comparison.ranks if record else []
    result.facts_read = scanner.log_facts.lines() if result.logs else {}
    return result


def scan_dumps(paths: list[Path]) -> PathScan:
    record = read_flight_record(paths)
    return PathScan(
        findings=_merge([], record),
        dumps=[str(p) for p in paths],
        ranks_compared=record.comparison.ranks,
    )


def _sort_files(folder: Path, result: PathScan) -> tuple[list[Path], list[Path]]:
    logs: list[Path] = []
    dumps: list[Path] = []
    for path in _walk(folder, result):
        try:
            with open_regular(path) as stream:
                head = stream.read(SAMPLE_BYTES)
        except OSError:
            result.skipped.append(str(path))
            continue
        if looks_like_dump(head):
            dumps.append(path)
        elif (
            head[:2] == _GZIP_MAGIC
            or head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
            or (head and not looks_binary(head))
        ):
            logs.append(path)
        elif head:
            result.skipped.append(str(path))
    return logs, dumps


def _walk(folder: Path, result: PathScan) -> list[Path]:
    """Regular files below folder, sorted, at most MAX_FILES, MAX_DEPTH deep, no symlinks
    followed out of it; what the limits leave out is counted in `result`."""
    found: list[Path] = []
    base_depth = len(folder.parts)
    for root, dirs, files in os.walk(folder, onerror=_raise):
        dirs[:] = sorted(d for d in dirs if not Path(root, d).is_symlink())
        if len(Path(root).parts) - base_depth >= MAX_DEPTH:
            result.folders_too_deep += len(dirs)
            dirs[:] = []
        for name in sorted(files):
            path = Path(root, name)
            if len(found) >= MAX_FILES:
                result.files_past_limit += 1
            elif path.is_file() and not path.is_symlink():
                found.append(path)
        if result.files_past_limit > MAX_FILES:  # counting stops too: "more than"
            break
    return found


def _raise(error: OSError) -> None:
    raise error


def _merge(log_results: list[tuple[Role, Finding]], record: FlightRecord | None) -> list[Finding]:
    """Log causes first, then where the flight recorder saw the ranks diverge, then the
    symptoms and notes of both; one finding per code (the first)."""
    ranked = [(role, 0, finding) for role, finding in log_results]
    if record is not None:
        ranked += [(Role.CAUSE, 1, finding) for finding in record.causes]
        ranked += [(Role.SYMPTOM, 1, finding) for finding in record.symptoms]
        ranked += [(Role.NOTE, 1, finding) for finding in record.notes]
    ranked.sort(key=lambda item: (item[0], item[1]))
    first: dict[str, Finding] = {}
    others: dict[str, list[str]] = {}
    for _, _, finding in ranked:
        if finding.code in first:
            others.setdefault(finding.code, []).append(finding.message)
        else:
            first[finding.code] = finding
    return [_with_others(finding, others.get(code, [])) for code, finding in first.items()]


def _with_others(finding: Finding, messages: list[str]) -> Finding:
    """The same code seen elsewhere too (another process group, another file's rank)."""
    if not messages:
        return finding
    evidence = {**finding.evidence, "also": messages[:MAX_ALSO]}
    return replace(finding, evidence=evidence)
