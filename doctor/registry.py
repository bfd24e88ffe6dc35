"""The rule registry: the @rule decorator, lookup for `explain`, and --select/--ignore."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .model import Finding, Location, Remediation, Severity

# A rule's scope says what it reads: "facts" (a FactSet from the probes), "script" (a parsed
# user script), "log" (lines of a log). Only the engine of that scope calls it.
SCOPES = ("facts", "script", "log", "doctor")


@dataclass(frozen=True)
class Hit:
    """One occurrence a rule found; the registry turns it into a Finding."""

    message: str
    evidence: Mapping[str, object] = field(default_factory=dict)
    fix: Remediation | None = None  # replaces the rule's default fix
    severity: Severity | None = None  # replaces the rule's default severity
    location: Location | None = None


@dataclass(frozen=True)
class RuleSpec:
    code: str
    name: str
    severity: Severity
    fix: Remediation
    scope: str
    doc: str
    check: Callable[..., Iterable[Hit]] | None

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""

    def finding(self, hit: Hit) -> Finding:
        return Finding(
            code=self.code,
            name=self.name,
            severity=hit.severity or self.severity,
            message=hit.message,
            fix=hit.fix or self.fix,
            location=hit.location,
            evidence=dict(hit.evidence),
        )

    def run(self, subject: Any) -> list[Finding]:
        assert self.check is not None, f"{self.code} has no check function"
        return [self.finding(hit) for hit in self.check(subject)]


RULES: dict[str, RuleSpec] = {}


def rule(
    code: str,
    name: str,
    severity: Severity,
    fix: Remediation,
    scope: str = "facts",
) -> Callable[[Callable[..., Iterable[Hit]]], Callable[..., Iterable[Hit]]]:
    """Registers a check function; its docstring is the rule's documentation."""

    def register(check: Callable[..., Iterable[Hit]]) -> Callable[..., Iterable[Hit]]:
        define(code, name, severity, fix, scope, inspect.getdoc(check) or "", check)
        return check

    return register


def define(
    code: str,
    name: str,
    severity: Severity,
    fix: Remediation,
    scope: str,
    doc: str,
    check: Callable[..., Iterable[Hit]] | None = None,
) -> RuleSpec:
    """Registers a rule; `check` may be None for codes that a table (log patterns) emits."""
    if scope not in SCOPES:
        raise ValueError(f"{code}: unknown scope {scope!r}")
    for other in RULES.values():
        if other.code == code or other.name == name:
            raise ValueError(f"{code} {name}: clashes with {other.code} {other.name}")
    spec = RuleSpec(code, name, severity, fix, scope, doc.strip(), check)
    RULES[code] = spec
    return spec


def all_rules() -> list[RuleSpec]:
    load_all()
    return sorted(RULES.values(), key=lambda spec: spec.code)


def rules_in_scope(scope: str) -> list[RuleSpec]:
    return [spec for spec in all_rules() if spec.scope == scope]


def lookup(code_or_name: str) -> RuleSpec | None:
    load_all()
    wanted = code_or_name.strip()
    for spec in RULES.values():
        if spec.code.upper() == wanted.upper() or spec.name == wanted.lower():
            return spec
    return None


def spec_for(code: str) -> RuleSpec:
    load_all()
    return RULES[code]


def load_all() -> None:
    from . import rules  # noqa: F401  (importing the package registers every rule)


class UnknownSelector(ValueError):
    """A --select/--ignore entry that names no code, prefix or rule name."""


@dataclass(frozen=True)
class Selector:
    """--select and --ignore: entries are codes, code prefixes ("DDP1") or rule names."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @classmethod
    def parse(cls, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> Selector:
        chosen = tuple(_split_entries(select))
        dropped = tuple(_split_entries(ignore))
        for entry in chosen + dropped:
            if not any(_matches(entry, spec) for spec in all_rules()):
                raise UnknownSelector(f"{entry!r} matches no rule code, prefix or name")
        return cls(chosen, dropped)

    def allows(self, code: str) -> bool:
        spec = RULES.get(code)
        if spec is None:
            return True
        if self.select and not any(_matches(e, spec) for e in self.select):
            return False
        return not any(_matches(e, spec) for e in self.ignore)

    def filter(self, findings: Iterable[Finding]) -> list[Finding]:
        return [f for f in findings if self.allows(f.code)]


def _split_entries(entries: Iterable[str]) -> Iterable[str]:
    for entry in entries:
        yield from (part.strip() for part in entry.split(",") if part.strip())


def _matches(entry: str, spec: RuleSpec) -> bool:
    return spec.code.upper().startswith(entry.upper()) or spec.name == entry.lower()
