"""Whether an expression's value comes from a kind of call: in the expression itself, or in
what every assignment of one of its names holds, a few names deep (`seed = int.from_bytes(
os.urandom(4)); torch.manual_seed(seed)`). Used where a seed's origin decides a finding."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ddp_doctor.script.facts import ScriptFacts


def comes_from_call(
    facts: ScriptFacts,
    node: ast.AST,
    hops: int,
    is_source: Callable[[ScriptFacts, ast.Call], bool],
) -> bool:
    """A call `is_source` accepts is in the expression, or in what every assignment of one of
    its names holds (followed `hops` names deep)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and is_source(facts, inner):
            return True
    if hops <= 0:
        return False
    for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
        assignments = facts.assignments_by_target.get(name, ())
        if assignments and all(
            a.value is not None and comes_from_call(facts, a.value, hops - 1, is_source)
            for a in assignments
        ):
            return True
    return False
