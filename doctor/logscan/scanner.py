"""Streams a log through the pattern table in bounded memory.

A log is read in binary chunks; one compiled prefilter finds the few lines that can match any
pattern, and only those are decoded and tried against the table. A torchrun failure summary
switches to reading every line until it ends. What is kept is one tally per code, so memory
stays flat however long the log is.
"""

from __future__ import annotations

import bisect
import contextlib
import signal
from collections.abc import Iterable
from dataclasses import dataclass

from ddp_doctor.model import Finding, Remediation

from .aggregate import CodeTally, LogHit
from .lines import LogLine, evidence_text, read_line
from .ordering import root_cause_order
from .pattern import Pattern, Prefilter, Role
from .patterns import BLOCK_STARTS, PATTERNS, ROOT_CAUSE_FIXES, ROOT_CAUSE_PATTERN, all_anchors
from .torchrun_block import TorchrunFailureBlock

MAX_LINE_BYTES = 1 << 20  # a longer "line" (binary data, no newlines) is scanned in pieces
MAX_OTHER_FAILURES = 16
PREFILTER = Prefilter(all_anchors())


@dataclass(frozen=True)
class ScanStats:
    bytes: int
    lines: int


class LogScanner:
    """Feed it bytes in any pieces, then ask for the findings, root cause first."""

    def __init__(self, source: str | None = None) -> None:
        self.source = source
        self.bytes = 0
        self.lines = 0  # complete lines seen so far
        self._pending = bytearray()  # the start of a line whose newline has not arrived yet
        self._tallies: dict[str, CodeTally] = {}
        self._blocks: list[TorchrunFailureBlock] = []

    def feed(self, data: bytes) -> None:
        self.bytes += len(data)
        begin = 0
        if self._pending:  # first close the line the previous piece left open
            newline = data.find(b"\n")
            if newline < 0:
                self._pending += data
                self._flush_endless_line()
                return
            self._scan(bytes(self._pending) + data[: newline + 1])
            begin = newline + 1
        cut = data.rfind(b"\n", begin) + 1
        if cut:
            self._scan(data, begin, cut)  # in place: no copy of the chunk
        self._pending = bytearray(data[cut or begin :])
        self._flush_endless_line()

    def _flush_endless_line(self) -> None:
        if len(self._pending) > MAX_LINE_BYTES:
            self._scan(bytes(self._pending))  # a piece of an endless line: its number stays
            self._pending = bytearray()

    def findings(self) -> list[Finding]:
        """Ends the scan (a last line without a newline counts) and orders the findings."""
        if self._pending:
            self._scan(bytes(self._pending))
            self.lines += 1
            self._pending = bytearray()
        for block in self._blocks:
            self._record_block(block)
        self._blocks.clear()
        ordered = root_cause_order(self._tallies.values(), ROOT_CAUSE_PATTERN.code)
        return [tally.finding(self.source) for tally in ordered]

    @property
    def stats(self) -> ScanStats:
        return ScanStats(self.bytes, self.lines + (1 if self._pending else 0))

    def _scan(self, chunk: bytes, begin: int = 0, end: int | None = None) -> None:
        """Scans the whole lines in chunk[begin:end] (or one piece of an endless line) and
        counts their newlines."""
        end = len(chunk) if end is None else end
        candidates = PREFILTER.candidates(chunk, begin, end)
        position, number = begin, self.lines + 1
        while position < end:
            if self._blocks:  # inside a torchrun summary every line counts
                start = position
            else:
                index = bisect.bisect_left(candidates, position)
                if index == len(candidates):
                    break
                start = chunk.rfind(b"\n", position, candidates[index]) + 1 or position
                number += chunk.count(b"\n", position, start)
            stop = chunk.find(b"\n", start, end)
            stop = end if stop < 0 else stop + 1
            self._handle(read_line(chunk[start:stop], number))
            number += 1
            position = stop
        self.lines += chunk.count(b"\n", begin, end)

    def _handle(self, line: LogLine) -> None:
        self._feed_blocks(line)
        for pattern in PATTERNS:
            if pattern.matches(line.body):
                self._record(pattern, line)
                return

    def _feed_blocks(self, line: LogLine) -> None:
        for block in self._blocks:
            if block.accepts(line.task):
                block.feed(line.body, line.number)
        for block in [b for b in self._blocks if b.done]:
            self._blocks.remove(block)
            self._record_block(block)
        starts_block = any(start in line.body for start in BLOCK_STARTS)
        if starts_block and not any(b.accepts(line.task) for b in self._blocks):
            block = TorchrunFailureBlock(line.number, line.task)
            if "Root Cause" in line.body:  # a summary pasted without its first lines
                block.feed(line.body, line.number)
            self._blocks.append(block)

    def _record(self, pattern: Pattern, line: LogLine) -> None:
        facts = {**line.speaker(), **pattern.extract(line.body)}
        _name_the_signal(facts)
        hit = LogHit(
            pattern=pattern,
            line=line.number,
            text=evidence_text(line.text, _anchor_position(pattern, line.text)),
            facts=facts,
            role=pattern.role_for(facts),
            fix=_signal_fix(pattern, facts),
        )
        self._tally(hit)

    def _record_block(self, block: TorchrunFailureBlock) -> None:
        root = block.root
        if root is None:
            return
        facts: dict[str, object] = {"source": "torchrun root cause", **root.facts}
        if block.task is not None:
            facts["task"] = block.task
        _name_the_signal(facts)
        others = [_brief(other) for other in block.others()[:MAX_OTHER_FAILURES]]
        if others:
            facts["other_failures"] = others
        self._tally(
            LogHit(
                pattern=ROOT_CAUSE_PATTERN,
                line=block.root_line or block.start_line,
                text=block.root_text,
                facts=facts,
                role=ROOT_CAUSE_PATTERN.role_for(facts),
                order_hint=str(root.facts.get("time", "")),
                fix=_signal_fix(ROOT_CAUSE_PATTERN, facts),
            )
        )

    def _tally(self, hit: LogHit) -> None:
        tally = self._tallies.get(hit.pattern.code)
        if tally is None:
            self._tallies[hit.pattern.code] = CodeTally.start(hit)
        else:
            tally.add(hit)


def _signal_fix(pattern: Pattern, facts: dict[str, object]) -> Remediation | None:
    if pattern.code != ROOT_CAUSE_PATTERN.code:
        return None
    return ROOT_CAUSE_FIXES.get(str(facts.get("signal")))


def _anchor_position(pattern: Pattern, text: str) -> int:
    positions = [text.find(anchor) for anchor in pattern.anchors]
    return min((p for p in positions if p >= 0), default=0)


def _name_the_signal(facts: dict[str, object]) -> None:
    """exitcode -9 means killed by signal 9: say SIGKILL, as torch >= 2.7 does itself."""
    exitcode = facts.get("exitcode")
    if isinstance(exitcode, int) and exitcode < 0 and "signal" not in facts:
        with contextlib.suppress(ValueError):  # not a signal number this platform knows
            facts["signal"] = signal.Signals(-exitcode).name


def _brief(failure: dict[str, object]) -> dict[str, object]:
    keys = ("rank", "local_rank", "host", "exitcode", "signal")
    brief = {key: failure[key] for key in keys if key in failure}
    _name_the_signal(brief)
    return brief


# --- the public entry points ----------------------------------------------------------------
READ_BYTES = 4 << 20


def scan_text(text: str, source: str | None = None) -> list[Finding]:
    """Findings in a log held in memory (a job's stderr), root cause first."""
    scanner = LogScanner(source)
    scanner.feed(text.encode("utf-8", errors="surrogateescape"))
    return scanner.findings()


def scan_lines(lines: Iterable[str], source: str | None = None) -> list[Finding]:
    """Findings in lines (with or without their line endings), root cause first."""
    scanner = LogScanner(source)
    batch: list[bytes] = []
    size = 0
    for line in lines:
        encoded = line.encode("utf-8", errors="surrogateescape")
        batch.append(encoded if encoded.endswith(b"\n") else encoded + b"\n")
        size += len(encoded)
        if size >= READ_BYTES:
            scanner.feed(b"".join(batch))
            batch, size = [], 0
    scanner.feed(b"".join(batch))
    return scanner.findings()


def scan_file(path: str, source: str | None = None) -> list[Finding]:
    """Findings in a log file, streamed; raises OSError when the file cannot be read."""
    with open(path, "rb") as stream:
        scanner = LogScanner(source if source is not None else str(path))
        while chunk := stream.read(READ_BYTES):
            scanner.feed(chunk)
    return scanner.findings()


__all__ = ["LogScanner", "Role", "ScanStats", "scan_file", "scan_lines", "scan_text"]
