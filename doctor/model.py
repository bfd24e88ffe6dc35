"""The report's vocabulary: severities, probe results, findings and the report itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum, IntEnum
from typing import Any

from ddp_doctor import __version__


class Severity(IntEnum):
    INFO = 10
    WARNING = 20
    ERROR = 30

    @property
    def word(self) -> str:
        return self.name.lower()

    @classmethod
    def from_word(cls, word: str) -> Severity:
        try:
            return cls[word.upper()]
        except KeyError:
            raise ValueError(f"unknown severity {word!r}") from None


class ProbeStatus(str, Enum):
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"
    CRASHED = "crashed"
    TIMED_OUT = "timed-out"


@dataclass(frozen=True)
class Remediation:
    text: str
    commands: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "commands": list(self.commands)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Remediation:
        return cls(str(data["text"]), tuple(str(c) for c in data.get("commands", ())))


@dataclass(frozen=True)
class Location:
    path: str
    line: int | None = None
    column: int | None = None
    cell: int | None = None  # a notebook's code cell (1-based); line is then in the cell

    def __str__(self) -> str:
        parts = [self.path] + [f"cell {self.cell}"] * (self.cell is not None)
        parts += [str(n) for n in (self.line, self.column) if n is not None]
        return ":".join(parts)

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"path": self.path, "line": self.line, "column": self.column}
        if self.cell is not None:
            shown["cell"] = self.cell
        return shown

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Location:
        cell = data.get("cell")
        return cls(str(data["path"]), data.get("line"), data.get("column"), cell)


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: Severity
    message: str
    fix: Remediation | None = None
    location: Location | None = None
    evidence: Mapping[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.word,
            "message": self.message,
            "fix": self.fix.to_json() if self.fix else None,
            "location": self.location.to_json() if self.location else None,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            code=str(data["code"]),
            name=str(data["name"]),
            severity=Severity.from_word(str(data["severity"])),
            message=str(data["message"]),
            fix=Remediation.from_json(data["fix"]) if data.get("fix") else None,
            location=Location.from_json(data["location"]) if data.get("location") else None,
            evidence=dict(data.get("evidence") or {}),
        )


@dataclass(frozen=True)
class ProbeResult:
    """What one probe measured. `facts` is a facts dataclass (see facts.py) or None."""

    probe: str
    status: ProbeStatus
    facts: Any
    duration_s: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is ProbeStatus.OK


@dataclass(frozen=True)
class Rejudged:
    """A saved report judged again by `diagnose`: with which version, when, by which command."""

    tool_version: str
    created: str
    command: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"tool_version": self.tool_version, "created": self.created, "command": self.command}


@dataclass(frozen=True)
class Report:
    tool_version: str
    created: str
    probes: tuple[ProbeResult, ...]
    findings: tuple[Finding, ...]
    command: str | None = None  # the command line that made it, for the reader of a report
    subject: str | None = None  # what was read, where no probe says it: "1200 lines of x.log"
    # `diagnose`: the report keeps who made it, when and with what; this says who judged again
    rejudged: Rejudged | None = None

    @property
    def nothing_found(self) -> str:
        """The closing line when there is no finding: what was examined, not "all is well"."""
        if self.subject:
            return f"No known failure pattern in {self.subject}."
        return "No problems found."

    def probe(self, name: str) -> ProbeResult | None:
        return next((result for result in self.probes if result.probe == name), None)

    def fails_at(self, threshold: Severity) -> bool:
        return any(f.severity >= threshold for f in self.findings)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first, then by code; ties keep the order the rules gave (root cause first)."""
    return sorted(findings, key=lambda f: (-f.severity, f.code))


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def make_report(
    results: Sequence[ProbeResult], findings: Sequence[Finding], subject: str | None = None
) -> Report:
    return Report(
        tool_version=__version__,
        created=now_utc(),
        probes=tuple(results),
        findings=tuple(findings),
        subject=subject,
    )
