"""Wrapper tests that leave a DDP wrapper in their plain arm: `isinstance(m, nn.DataParallel)`
names only DataParallel, and DDP is no subclass of it (DDP117, the data flow's conditionals)."""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import ScriptFacts


def tests_data_parallel_only(facts: ScriptFacts, test: ast.expr) -> bool:
    """`isinstance(m, torch.nn.DataParallel)` (or a tuple of DataParallel names only)."""
    if not (isinstance(test, ast.Call) and names.last_identifier(test.func) == "isinstance"):
        return False
    if len(test.args) != 2:
        return False
    second = test.args[1]
    kinds = second.elts if isinstance(second, ast.Tuple) else [second]
    return bool(kinds) and all(_names_data_parallel(facts, kind) for kind in kinds)


def _names_data_parallel(facts: ScriptFacts, kind: ast.expr) -> bool:
    qualified = facts.qualname(kind)
    if qualified is not None:
        return qualified == names.DATA_PARALLEL
    return names.last_identifier(kind) == "DataParallel"
