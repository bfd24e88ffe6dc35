"""Many matched lines, one finding per code: the first (or strongest) line plus a count."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddp_doctor.model import Finding, Location, Remediation, Severity
from ddp_doctor.registry import RuleSpec, spec_for

from .pattern import Pattern, Role, render_message

MAX_COLLECTED = 5  # distinct values kept for a collected key (e.g. NCCL WARN messages)
MAX_RANKS = 1024
MAX_KEPT_HITS = 32  # the first hits of a code are kept to complete the primary's facts
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
        return self.primary.role

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
        spec = _registered(pattern.code)
        return Finding(
            code=pattern.code,
            name=spec.name if spec else pattern.name,
            severity=pattern.severity or (spec.severity if spec else Severity.ERROR),
            message=render_message(pattern.message, facts) + self._rank_spread(),
            fix=self.primary.fix or pattern.fix or (spec.fix if spec else None),
            location=Location(source, self.primary.line) if source else None,
            evidence=evidence,
        )


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


def _registered(code: str) -> RuleSpec | None:
    """The code's registered spec; None while its block is not registered (never invent one)."""
    try:
        return spec_for(code)
    except KeyError:
        return None
