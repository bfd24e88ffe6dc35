"""Many matched lines, one finding per code: the first (or strongest) line plus a count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ddp_doctor.logscan.pattern import Pattern, Role, render_message
from ddp_doctor.model import Finding, Location, Remediation, Severity
from ddp_doctor.registry import Hit, spec_for

MAX_COLLECTED = 5  # distinct values kept for a collected key (e.g. NCCL WARN messages)
MAX_RANKS = 1024
MAX_KEPT_HITS = 32  # the first hits of a code are kept to complete the primary's facts
MAX_HINTS = 16  # the first lines of each hint
_SPEAKER_KEYS = ("task", "rank", "local_rank")


@dataclass(frozen=True)
class LogHit:
    """One line (or one torchrun summary) that matched a pattern."""

    pattern: Pattern
    line: int
    text: str
    facts: dict[str, object]
    role: Role
    order_hint: str = ""  # breaks ties between equal priorities before the line number
    fix: Remediation | None = None
    source: str | None = None  # the file, when one scan reads several

    @property
    def strength(self) -> tuple[int, str, int]:
        """Smaller is stronger: priority first, then the hint (a time), then earlier lines."""
        return (-self.pattern.priority, self.order_hint, self.line)


@dataclass
class CodeTally:
    """Everything the log said about one code."""

    primary: LogHit
    count: int = 0
    first_line: int = 0
    kept: list[LogHit] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    collected: dict[str, list[object]] = field(default_factory=dict)
    verdict: Verdict | None = None  # what inference.py concluded from the whole log

    @classmethod
    def start(cls, hit: LogHit) -> CodeTally:
        tally = cls(primary=hit, first_line=hit.line)
        tally.add(hit)
        return tally

    @property
    def code(self) -> str:
        return self.primary.pattern.code

    @property
    def role(self) -> Role:
        if self.verdict is not None and self.verdict.role is not None:
            return self.verdict.role
        return self.primary.role

    def judge(self, **changes: object) -> None:
        """Records a conclusion drawn from the whole log (a role, a fix, a note...)."""
        self.verdict = replace(self.verdict or Verdict(), **changes)  # type: ignore[arg-type]

    def add(self, hit: LogHit) -> None:
        self.count += 1
        self.first_line = min(self.first_line, hit.line)
        if hit.strength < self.primary.strength:
            self.primary = hit
        if len(self.kept) < MAX_KEPT_HITS:
            self.kept.append(hit)
        rank = hit.facts.get("rank")
        if isinstance(rank, int) and len(self.ranks) < MAX_RANKS:
            self.ranks.add(rank)
        for key in hit.pattern.collect:
            values = self.collected.setdefault(key, [])
            value = hit.facts.get(key)
            if value is not None and value not in values and len(values) < MAX_COLLECTED:
                values.append(value)

    def facts(self) -> dict[str, object]:
        """The primary hit's facts, completed by what other lines of the same speaker said
        (the "Parameter indices ..." line after "Expected to have finished reduction")."""
        facts = dict(self.primary.facts)
        for hit in self.kept:
            if _same_speaker(self.primary.facts, hit.facts):
                for key, value in hit.facts.items():
                    facts.setdefault(key, value)
        return facts

    def _rank_spread(self) -> str:
        if len(self.ranks) < 2:
            return ""
        return f" (seen on ranks {_compact_ranks(sorted(self.ranks))})"

    def finding(self, source: str | None) -> Finding:
        pattern = self.primary.pattern
        facts = self.facts()
        evidence: dict[str, object] = {
            "line": self.primary.line,
            "text": self.primary.text,
            "count": self.count,
            **facts,
        }
        if self.first_line != self.primary.line:
            evidence["first_line"] = self.first_line
        if len(self.ranks) > 1:
            evidence["ranks"] = sorted(self.ranks)
        for key, values in self.collected.items():
            evidence[key + "s"] = list(values)
        verdict = self.verdict or Verdict()
        evidence.update(verdict.evidence)
        message = render_message(pattern.message, {**facts, **verdict.evidence})
        message += self._rank_spread()
        where = self.primary.source or source
        hit = Hit(
            message=f"{message}; {verdict.note}" if verdict.note else message,
            evidence=evidence,
            fix=verdict.fix or self.primary.fix or pattern.fix,
            severity=verdict.severity or pattern.severity,
            location=Location(where, self.primary.line) if where else None,
        )
        return spec_for(pattern.code).finding(hit)


@dataclass(frozen=True)
class Verdict:
    """What the whole log says about one code's finding, beyond its own lines."""

    role: Role | None = None
    severity: Severity | None = None
    fix: Remediation | None = None
    note: str = ""  # appended to the message
    evidence: Mapping[str, object] = field(default_factory=dict)


@dataclass
class Hints:
    """The first lines of each hint (patterns_hints.py) and how many there were."""

    hits: dict[str, list[LogHit]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, hit: LogHit) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        kept = self.hits.setdefault(name, [])
        if len(kept) < MAX_HINTS:
            kept.append(hit)

    def get(self, name: str) -> list[LogHit]:
        return self.hits.get(name, [])


def _same_speaker(one: dict[str, object], other: dict[str, object]) -> bool:
    """No identity (task, rank, local rank) that both know differs."""
    return all(one[key] == other[key] for key in _SPEAKER_KEYS if key in one and key in other)


def _compact_ranks(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 5, 7] -> "0-3,5,7"."""
    parts: list[str] = []
    start = previous = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == previous + 1:
            previous = rank
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if rank is not None:
            start = previous = rank
    return ",".join(parts)
