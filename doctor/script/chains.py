"""Findings whose cause sits in a helper module the user did not name: reported on the entry
point that reaches it, with the call chain, and the helper's line as a related location.

`check train.py` reads `utils/dist.py` for context when train.py imports it. A mistake in the
helper (a torch.save with no rank guard in `save_checkpoint()`) is the user's mistake in
train.py's program, so it is judged there and reported at the call in train.py that leads to
it: `train.py:40:5: ... torch.save(...) in save_checkpoint() runs on every rank (in
utils/dist.py:12, reached by train.py:40 -> utils/dist.py:save_checkpoint)`. In a folder run
the helper is checked and reported itself, so nothing here applies to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from ddp_doctor.model import Finding, Location
from ddp_doctor.script.callgraph import CallGraph, Edge
from ddp_doctor.script.evidence import imported_closure
from ddp_doctor.script.facts import Function, ScriptFacts
from ddp_doctor.script.hits import CAUSE, spelled_like

MAX_CHAIN = 8  # calls followed up from the helper before giving up on a chain


def helper_findings(
    entries: Sequence[ScriptFacts], judge: Callable[[ScriptFacts], list[Finding]]
) -> list[Finding]:
    """The findings of the context-only modules that the given files import, each moved onto
    the given file that reaches it."""
    python = [e for e in entries if e.is_python]
    if not python:
        return []
    project = python[0].project
    context = [
        f
        for f in list(project.files.values())
        if f.is_python and os.path.abspath(f.path) in project.context_only
    ]
    found: list[Finding] = []
    for helper in context:
        importers = [e for e in python if any(m is helper for m in imported_closure(e))]
        if not importers:
            continue
        for finding in judge(helper):
            moved = _onto_entry(finding, helper, importers, project.graph)
            if moved is not None:
                found.append(moved)
    return found


def _onto_entry(
    finding: Finding, helper: ScriptFacts, entries: list[ScriptFacts], graph: CallGraph
) -> Finding | None:
    where = finding.location
    if where is None or where.path != helper.path or finding.code.startswith("DDP9"):
        return None
    unit = _unit_at(helper, where.line or 1)
    chain = _chain_from(graph, unit, entries)
    if chain is None:
        return None
    first = chain[0]
    helper_path = spelled_like(helper.path, first.facts.path)
    steps = " -> ".join(
        [f"{first.facts.path}:{first.site.node.lineno}"] + [f"{e.callee.qualname}()" for e in chain]
    )
    cause = {"path": helper_path, "line": where.line, "column": where.column, "role": CAUSE}
    evidence = {
        **finding.evidence,
        "related": [cause, *_places(finding.evidence)],
        "chain": [
            f"{spelled_like(e.facts.path, first.facts.path)}:{e.site.node.lineno}" for e in chain
        ],
    }
    return replace(
        finding,
        message=f"{finding.message} (in {helper_path}:{where.line}, reached by {steps})",
        location=Location(first.facts.path, first.site.node.lineno, first.site.node.col_offset + 1),
        evidence=evidence,
    )


def _unit_at(facts: ScriptFacts, line: int) -> Function:
    """The innermost function of the file whose body holds the line (the module otherwise)."""
    best = facts.module_unit
    for function in facts.functions:
        node = function.node
        inside = node.lineno <= line <= (node.end_lineno or node.lineno)
        if inside and (best is facts.module_unit or node.lineno >= best.node.lineno):
            best = function
    return best


def _chain_from(graph: CallGraph, unit: Function, entries: list[ScriptFacts]) -> list[Edge] | None:
    """The calls from a given file down to `unit`, outermost first (breadth-first, so the
    shortest); None when no given file reaches it."""
    wanted = {id(e) for e in entries}
    frontier: list[tuple[Function, list[Edge]]] = [(unit, [])]
    seen = {unit}
    for _ in range(MAX_CHAIN):
        next_frontier = []
        for current, path in frontier:
            for edge in graph.callers(current):
                chain = [edge, *path]
                if id(edge.facts) in wanted:
                    return chain
                if edge.caller not in seen:
                    seen.add(edge.caller)
                    next_frontier.append((edge.caller, chain))
        frontier = next_frontier
        if not frontier:
            break
    return None


def _places(evidence: Mapping[str, object]) -> list[object]:
    places = evidence.get("related")
    return list(places) if isinstance(places, list) else []
