"""One file in, its findings out: parse once, walk once, run every selected script rule.

`prepare` turns a file's text into facts; `judge` runs the rules on them once every file of
the tree is prepared (rules may follow calls into the other files); `analyze` does both for a
file checked on its own.
"""

from __future__ import annotations

import ast
import traceback
import warnings
from collections.abc import Sequence

from ddp_doctor.model import Finding, Location, Severity
from ddp_doctor.registry import Hit, RuleSpec, rules_judged, spec_for
from ddp_doctor.script.evidence import NEEDS_DISTRIBUTED, PER_RANK_OPINIONS, runs_distributed
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.files import PYTHON, Candidate, read_text
from ddp_doctor.script.hits import merge_causes
from ddp_doctor.script.kinds import rpc_only
from ddp_doctor.script.notebook import NotebookScript, without_broken_cells
from ddp_doctor.script.program import project_of
from ddp_doctor.script.rules.doctor import FILE_UNREADABLE, SYNTAX_ERROR
from ddp_doctor.script.suppress import is_suppressed, suppressions, without_suppressed
from ddp_doctor.script.walker import build_facts

RULE_CRASHED = "DDP903"


def script_rules() -> list[RuleSpec]:
    """Every rule that reads a script, in code order."""
    return rules_judged("script")


def analyze(path: str, source: str, kind: str, rules: Sequence[RuleSpec]) -> list[Finding]:
    """The findings for one file's text checked on its own, suppression comments applied."""
    prepared = prepare(path, source, kind)
    if isinstance(prepared, Finding):
        return [prepared]
    if not prepared.is_python:
        return judge(prepared, rules)
    project = project_of([prepared], load=load_for_context)
    try:
        return judge(prepared, rules)
    finally:
        project.close()


def prepare(path: str, source: str, kind: str) -> ScriptFacts | Finding:
    """The facts of one file, or the finding that says why it cannot be checked."""
    if kind != PYTHON:
        return ScriptFacts(path=path, source=source, tree=None)
    parsed = parse(path, source)
    if isinstance(parsed, Finding):
        return parsed
    try:
        return build_facts(path, source, parsed)
    except RecursionError:
        return unreadable(path, "nested too deeply to analyse")


def prepare_notebook(
    path: str, script: NotebookScript
) -> tuple[ScriptFacts | Finding, NotebookScript, list[Finding]]:
    """A notebook's facts. When a cell that is no Python (a shell line pasted without `!`)
    stops it from parsing, the facts of the other cells, and an info for each cell left out."""
    prepared = prepare(path, script.source, PYTHON)
    if not (isinstance(prepared, Finding) and prepared.code == SYNTAX_ERROR):
        return prepared, script, []
    repaired = without_broken_cells(script)
    if not repaired.left_out:
        return prepared, script, []
    notes = [
        spec_for(SYNTAX_ERROR).finding(
            Hit(
                f"cell left out: it does not parse as Python ({why}); the other cells were checked",
                {"left_out": True},
                severity=Severity.INFO,
                location=Location(path, line, 1),
            )
        )
        for line, why in repaired.left_out
    ]
    return prepare(path, repaired.source, PYTHON), repaired, notes


def judge(facts: ScriptFacts, rules: Sequence[RuleSpec]) -> list[Finding]:
    """Every rule on one file: suppressed lines dropped, then one finding per cause."""
    if facts.is_python and not runs_distributed(facts):
        rules = [spec for spec in rules if spec.code not in NEEDS_DISTRIBUTED]
    elif facts.is_python and rpc_only(facts):
        rules = [spec for spec in rules if spec.code not in PER_RANK_OPINIONS]
    table = suppressions(facts.source)
    findings: list[Finding] = []
    for spec in rules:
        findings.extend(_run_guarded(spec, facts, table))
    return without_suppressed(findings, facts.source, table)


def load_for_context(path: str) -> ScriptFacts | None:
    """A module of the tree that no path given to `check` names, read to answer questions."""
    text = read_text(Candidate(path, PYTHON))
    if not isinstance(text, str):
        return None
    prepared = prepare(path, text, PYTHON)
    return prepared if isinstance(prepared, ScriptFacts) else None


def parse(path: str, source: str) -> ast.Module | Finding:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences are the user's business
            return ast.parse(source, filename=path)
    except SyntaxError as error:
        line = error.lineno or 1
        column = error.offset or 1
        message = f"cannot parse: {error.msg} (line {line})"
        return spec_for(SYNTAX_ERROR).finding(Hit(message, location=Location(path, line, column)))
    except (ValueError, RecursionError, MemoryError) as error:
        return spec_for(SYNTAX_ERROR).finding(
            Hit(f"cannot parse: {type(error).__name__}: {error}", location=Location(path, 1, 1))
        )


def unreadable(path: str, reason: str) -> Finding:
    return spec_for(FILE_UNREADABLE).finding(
        Hit(f"not checked: {reason}", {"reason": reason}, location=Location(path))
    )


def _run_guarded(spec: RuleSpec, facts: ScriptFacts, table: dict[int, set[str]]) -> list[Finding]:
    try:
        found = [spec.finding(h) for h in merge_causes(_kept(spec, facts, table))]
    except Exception as error:  # one broken rule must not hide the others' findings
        frames = traceback.extract_tb(error.__traceback__)
        where = f" at {frames[-1].name}:{frames[-1].lineno}" if frames else ""
        message = f"rule {spec.code} ({spec.name}) crashed on this file: {type(error).__name__}: {error}{where}"
        crash = Hit(message, {"rule": spec.code}, location=Location(facts.path))
        return [spec_for(RULE_CRASHED).finding(crash)]
    return found


def _kept(spec: RuleSpec, facts: ScriptFacts, table: dict[int, set[str]]) -> list[Hit]:
    assert spec.check is not None
    hits = sorted(spec.check(facts), key=_place)
    if not table:
        return hits
    return [h for h in hits if not is_suppressed(spec.finding(h), table)]


def _place(found: Hit) -> tuple[int, int]:
    where = found.location
    return (where.line or 0, where.column or 0) if where is not None else (0, 0)
