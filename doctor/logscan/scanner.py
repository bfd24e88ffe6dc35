"""Streams a log through the pattern table in bounded memory.

A log is read in binary chunks; one compiled prefilter finds the few lines that can match any
pattern, and only those are decoded and tried against the table. A torchrun failure summary
switches to reading every line until it ends. What is kept is one tally per code, so memory
stays flat however long the log is.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ddp_doctor.logscan.aggregate import CodeTally, Hints, LogHit
from ddp_doctor.logscan.crash_fixes import crash_fix, signal_name, signal_of_description
from ddp_doctor.logscan.factmerge import with_fact_findings
from ddp_doctor.logscan.gpu_faults import gpu_fault_first
from ddp_doctor.logscan.inference import infer
from ddp_doctor.logscan.lines import LogLine, evidence_text, read_line
from ddp_doctor.logscan.logfacts import FACT_ONLY_ANCHORS, LogFacts
from ddp_doctor.logscan.ordering import root_cause_order
from ddp_doctor.logscan.pattern import Pattern, Prefilter, Role
from ddp_doctor.logscan.patterns import (
    BLOCK_STARTS,
    HINTS,
    PATTERNS,
    REPLICA_PATTERN,
    ROOT_CAUSE_PATTERN,
    all_anchors,
    table_anchors,
)
from ddp_doctor.logscan.quoting import quote_nccl_warnings
from ddp_doctor.logscan.replica_block import ReplicaErrorBlock
from ddp_doctor.logscan.torchrun_block import TorchrunFailureBlock
from ddp_doctor.model import Finding, Remediation

MAX_LINE_BYTES = 1 << 20  # a longer "line" (binary data, no newlines) is scanned in pieces
MAX_OTHER_FAILURES = 16
PREFILTER = Prefilter(all_anchors())
TABLE_PREFILTER = Prefilter(table_anchors())  # a superset test, as PREFILTER's


@dataclass(frozen=True)
class ScanStats:
    bytes: int
    lines: int


class LogScanner:
    """Feed it bytes in any pieces, then ask for the findings, root cause first."""

    def __init__(self, source: str | None = None) -> None:
        self.source = source
        self.bytes = 0
        self.lines = 0  # complete lines seen so far in this file
        self.total_lines = 0  # in the files before it
        self.table_lines = 0  # lines that reached the pattern table (the prefilter's picks)
        self._pending = bytearray()  # the start of a line whose newline has not arrived yet
        self._tallies: dict[str, CodeTally] = {}
        self._hints = Hints()
        self._blocks: list[TorchrunFailureBlock | ReplicaErrorBlock] = []
        self.log_facts = LogFacts()  # what the lines say about the run (logfacts.py)
        self.file_speaker: dict[str, int] = {}  # a folder's per-rank file: {"rank": 3} ...

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

    def next_file(self, source: str, speaker: dict[str, int] | None = None) -> None:
        """Ends the current file and reads the next one's lines (numbered from 1) into the same
        tallies: what one rank's log shows explains another's (a folder of per-rank logs).
        `speaker` ({"rank": 3}, {"local_rank": 0}, {"task": 2}) is who wrote a per-rank file:
        its lines without a launcher prefix of their own are that rank's."""
        self._end_file()
        self.file_speaker = dict(speaker or {})
        self.total_lines += self.lines
        self.lines = 0
        self.source = source
        self.log_facts.start_file(source, self.total_lines)

    def findings(self) -> list[Finding]:
        """Ends the scan (a last line without a newline counts) and orders the findings."""
        return [finding for _, finding in self.results()]

    def results(self) -> list[tuple[Role, Finding]]:
        """The findings root cause first, each with the role it was given."""
        self._end_file()
        tallies = infer(self._tallies, self._hints)
        gpu_fault_first(tallies)
        quote_nccl_warnings(tallies, self.log_facts)
        ordered = root_cause_order(tallies.values(), ROOT_CAUSE_PATTERN.code)
        results = [(tally.role, tally.finding(self.source)) for tally in ordered]
        return with_fact_findings(results, self.log_facts, self.source)

    def _end_file(self) -> None:
        if self._pending:
            self._scan(bytes(self._pending))
            self.lines += 1
            self._pending = bytearray()
        for block in self._blocks:
            self._record_block(block)
        self._blocks.clear()

    @property
    def stats(self) -> ScanStats:
        lines = self.total_lines + self.lines + (1 if self._pending else 0)
        return ScanStats(self.bytes, lines)

    def _scan(self, chunk: bytes, begin: int = 0, end: int | None = None) -> None:
        """Scans the whole lines in chunk[begin:end] (or one piece of an endless line) and
        counts their newlines."""
        end = len(chunk) if end is None else end
        candidates = PREFILTER.candidates(chunk, begin, end)
        position, number = begin, self.lines + 1
        while position < end:
            if self._blocks or self.log_facts.following:  # every line counts in a block
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
        if self.file_speaker and not line.labelled:  # a per-rank file's unprefixed line
            line = replace(line, **self.file_speaker)
        if self.log_facts.following:  # torchrun's rendezvous result, then maybe a candidate
            self.log_facts.read_following(line.body, self._fact_line(line))
            if not self._blocks and not PREFILTER.candidates(line.body.encode("utf-8", "replace")):
                return
        self.log_facts.read(line.body, self._fact_line(line), line.who())
        if not self._blocks and _facts_only(line.body):
            return
        self.table_lines += 1
        self._feed_blocks(line)
        for hint in HINTS:
            if hint.matches(line.body):
                self._hints.add(hint.name, self._hint_hit(hint, line))
        pattern = first_pattern(line.body)
        if pattern is REPLICA_PATTERN:
            hit = self._hit(pattern, line)
            self._blocks.append(ReplicaErrorBlock(line.number, line.task, hit.facts, hit.text))
        elif pattern is not None:
            self._tally(self._hit(pattern, line))

    def _fact_line(self, line: LogLine) -> int:
        """Facts number lines across a folder's files (LogFacts.locate maps them back)."""
        return self.total_lines + line.number

    def _feed_blocks(self, line: LogLine) -> None:
        for block in self._blocks:
            if not block.accepts(line.task):
                continue
            if isinstance(block, ReplicaErrorBlock):
                block.feed(line.body, line.number, line.indent)
            else:
                block.feed(line.body, line.number)
        for block in [b for b in self._blocks if b.done]:
            self._blocks.remove(block)
            self._record_block(block)
        starts_block = any(start in line.body for start in BLOCK_STARTS)
        torchrun_blocks = [b for b in self._blocks if isinstance(b, TorchrunFailureBlock)]
        if starts_block and not any(b.accepts(line.task) for b in torchrun_blocks):
            block = TorchrunFailureBlock(line.number, line.task)
            if "root cause" in line.body.lower():  # a summary pasted without its first lines
                block.feed(line.body, line.number)
            self._blocks.append(block)

    def _hit(self, pattern: Pattern, line: LogLine) -> LogHit:
        facts = {**line.speaker(), **pattern.extract(line.body)}
        _name_the_signal(facts)
        return LogHit(
            pattern=pattern,
            line=line.number,
            text=evidence_text(line.text, _anchor_position(pattern, line.text)),
            facts=facts,
            role=pattern.role_for(facts),
            fix=_signal_fix(pattern, facts),
            source=self.source,
        )

    def _hint_hit(self, hint: Pattern, line: LogLine) -> LogHit:
        """A progress bar redraws itself with carriage returns: its last state is the one."""
        segments = [part for part in line.body.split("\r") if hint.matches(part)]
        last = segments[-1] if segments else line.body
        at = max(line.text.rfind(anchor) for anchor in hint.anchors)
        facts = {**line.speaker(), **hint.extract(last)}
        text = evidence_text(line.text, max(at, 0))
        return LogHit(hint, line.number, text, facts, hint.role, source=self.source)

    def _record_block(self, block: TorchrunFailureBlock | ReplicaErrorBlock) -> None:
        if isinstance(block, ReplicaErrorBlock):
            self._record_replica(block)
            return
        root = block.root
        if root is None:
            return
        facts: dict[str, object] = {"source": "torchrun root cause", **root.facts}
        if block.task is not None:
            facts["task"] = block.task
        _name_the_signal(facts)
        line = block.root_line or block.start_line
        self.log_facts.run.exited(facts, self.total_lines + line, first=True)
        for other in block.others()[:MAX_OTHER_FAILURES]:
            self.log_facts.run.exited(_brief(other), self.total_lines + block.start_line, False)
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
                source=self.source,
            )
        )

    def _record_replica(self, block: ReplicaErrorBlock) -> None:
        facts = dict(block.facts)
        if block.error is not None:
            facts["replica_error"] = block.error
            facts["replica_error_line"] = block.error_line
            known = first_pattern(block.error)
            if known is not None and known is not REPLICA_PATTERN:
                facts["replica_error_code"] = known.code
        hit = LogHit(
            REPLICA_PATTERN,
            block.start_line,
            block.text,
            facts,
            REPLICA_PATTERN.role_for(facts),
            source=self.source,
        )
        self._tally(hit)

    def _tally(self, hit: LogHit) -> None:
        tally = self._tallies.get(hit.pattern.code)
        if tally is None:
            self._tallies[hit.pattern.code] = CodeTally.start(hit)
        else:
            tally.add(hit)


def _facts_only(body: str) -> bool:
    """A fact-only line (NCCL's Init COMPLETE...) that no table anchor may be in."""
    if not any(anchor in body for anchor in FACT_ONLY_ANCHORS):
        return False
    return not TABLE_PREFILTER.candidates(body.encode("utf-8", "replace"))


def _replace(finding: Finding, **changes: object) -> Finding:
    from dataclasses import replace

    return replace(finding, **changes)


def first_pattern(body: str) -> Pattern | None:
    """The table's row for a line: the first that matches and accepts what it found."""
    for pattern in PATTERNS:
        if pattern.matches(body) and (
            pattern.accept is None or pattern.accepts(pattern.extract(body))
        ):
            return pattern
    return None


def _signal_fix(pattern: Pattern, facts: dict[str, object]) -> Remediation | None:
    """The signal's own fix for a rank's death; a summary line read alone names it with keys of
    its own (killed_by, exit_status), which pick the fix too."""
    if pattern.code != ROOT_CAUSE_PATTERN.code:
        return None
    return crash_fix(
        {
            "signal": facts.get("signal", facts.get("killed_by")),
            "exitcode": facts.get("exitcode", facts.get("exit_status")),
        }
    )


def _anchor_position(pattern: Pattern, text: str) -> int:
    positions = [text.find(anchor) for anchor in pattern.anchors]
    return min((p for p in positions if p >= 0), default=0)


def _name_the_signal(facts: dict[str, object]) -> None:
    """exitcode -9 means killed by signal 9: say SIGKILL, as torch >= 2.7 does itself; so does
    a signal torchrun 1.x printed as a number ("Received 15 death signal"), or DataLoader in
    strsignal's words ("killed by signal: Killed")."""
    number = facts.get("signal")
    if isinstance(number, int) or (isinstance(number, str) and number.isdigit()):
        facts["signal"] = signal_name(-int(number)) or number
    elif isinstance(number, str) and not number.startswith("SIG"):  # DataLoader's "Killed"
        facts["signal"] = signal_of_description(number) or number
    exitcode = facts.get("exitcode")
    if isinstance(exitcode, int) and "signal" not in facts:
        name = signal_name(exitcode)
        if name is not None:
            facts["signal"] = name


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


__all__ = ["LogScanner", "ScanStats", "first_pattern", "scan_file", "scan_lines", "scan_text"]
