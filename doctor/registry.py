"""The rule registry: checks and texts attached to the code table, loaded only when needed.

codes.py lists every code; a rule module attaches a check function (`@rule`) or, for a code
found only in texts, its documentation and fix (`describe`). A command imports just the
modules of the codes it can report: `check` the script rules, `run` the facts rules, `explain`
one module, `rules` none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddp_doctor.codes import BY_CODE, BY_NAME, CODES, Code
from ddp_doctor.model import Finding, Location, Remediation, Severity

WITH_CHECK = ("facts", "script")  # judged by a check function; the other kinds have none

Check = Callable[..., Iterable["Hit"]]


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
    """A code of the table with what its module attached: the default fix, the documentation
    (What it finds, Why it matters, Example, Fix) and, for facts and script, the check."""

    entry: Code
    fix: Remediation
    details: str
    check: Check | None

    code = property(lambda self: self.entry.code)
    name = property(lambda self: self.entry.name)
    severity = property(lambda self: self.entry.severity)
    judged = property(lambda self: self.entry.judged)
    summary = property(lambda self: self.entry.summary)

    @property
    def doc(self) -> str:
        return f"{self.summary}\n\n{self.details}" if self.details else self.summary

    def finding(self, hit: Hit) -> Finding:
        """The one way a finding is built (tests/test_finding_fixes.py holds every producer to
        it): the code's name, severity and registered fix, unless the hit gives its own."""
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


class RegistryError(ValueError):
    """A rule module disagrees with the code table (a programming error, found by the tests)."""


def rule(code: str, fix: Remediation) -> Callable[[Check], Check]:
    """Attaches a check function to a facts or script code; its docstring documents it."""

    def register(check: Check) -> Check:
        import inspect  # here, not at the top: `--help` never registers a rule

        _register(code, fix, inspect.getdoc(check) or "", check)
        return check

    return register


def describe(code: str, fix: Remediation, doc: str) -> RuleSpec:
    """Attaches the documentation and fix of a code that no check function judges."""
    import inspect

    return _register(code, fix, inspect.cleandoc(doc), None)


def _register(code: str, fix: Remediation, details: str, check: Check | None) -> RuleSpec:
    entry = BY_CODE.get(code)
    if entry is None:
        raise RegistryError(f"{code} is not in the code table (codes.py)")
    if (check is not None) != (entry.judged in WITH_CHECK):
        raise RegistryError(f"{code} is judged {entry.judged!r}: check function mismatch")
    if code in RULES:
        raise RegistryError(f"{code} registered twice")
    spec = RuleSpec(entry, fix, details.strip(), check)
    RULES[code] = spec
    return spec


def load(judged: str) -> None:
    """Imports the modules of every code judged this way (`facts`, `script`, `log` ...)."""
    _import(entry.module for entry in CODES if entry.judged == judged)


def load_all() -> None:
    _import(entry.module for entry in CODES)


def _import(modules: Iterable[str]) -> None:
    for module in dict.fromkeys(modules):
        importlib.import_module(f"ddp_doctor.{module}")


def all_rules() -> list[RuleSpec]:
    load_all()
    return [RULES[entry.code] for entry in CODES]


def rules_judged(judged: str) -> list[RuleSpec]:
    load(judged)
    return [RULES[entry.code] for entry in CODES if entry.judged == judged]


def spec_for(code: str) -> RuleSpec:
    if code not in RULES:
        _import([BY_CODE[code].module])
    return RULES[code]


def find_code(code_or_name: str) -> Code | None:
    wanted = code_or_name.strip()
    return BY_CODE.get(wanted.upper()) or BY_NAME.get(wanted.lower())


def lookup(code_or_name: str) -> RuleSpec | None:
    entry = find_code(code_or_name)
    return spec_for(entry.code) if entry else None


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
            if not any(_matches(entry, code) for code in CODES):
                raise UnknownSelector(f"{entry!r} matches no rule code, prefix or name")
        return cls(chosen, dropped)

    def allows(self, code: str) -> bool:
        entry = BY_CODE.get(code)
        if entry is None:
            return True
        if self.select and not any(_matches(e, entry) for e in self.select):
            return False
        return not any(_matches(e, entry) for e in self.ignore)

    def filter(self, findings: Iterable[Finding]) -> list[Finding]:
        return [f for f in findings if self.allows(f.code)]


def _split_entries(entries: Iterable[str]) -> Iterable[str]:
    for entry in entries:
        yield from (part.strip() for part in entry.split(",") if part.strip())


def _matches(entry: str, code: Code) -> bool:
    """A code, a code prefix, a rule name, or ALL (every code, as in ruff)."""
    upper = entry.upper()
    return upper == "ALL" or code.code.upper().startswith(upper) or code.name == entry.lower()
