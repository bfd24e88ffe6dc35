"""Modules of the checked tree that import torch when they are imported (DDP110): jepa's
app/main.py imports `src.utils.distributed` at its top, and that module imports torch, so
torch is loaded before any function of main.py runs (a spawned child imports the main
module again first)."""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import Context, ScriptFacts, TorchImport

_DEPTH = 4  # how far `a imports b imports c imports torch` is followed


def project_torch_imports(facts: ScriptFacts) -> list[TorchImport]:
    """The module-level imports of this file that load torch through a module of the tree."""
    if facts.tree is None:
        return []
    found = []
    for node in facts.tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            _loads_torch(target, _DEPTH, {id(facts)}) for target in _imported(facts, node)
        ):
            found.append(TorchImport(node, Context()))
    return found


def _imported(facts: ScriptFacts, node: ast.Import | ast.ImportFrom) -> list[ScriptFacts]:
    project = facts.project
    if isinstance(node, ast.Import):
        named = [project.module(facts, alias.name, 0) for alias in node.names]
    else:
        named = [project.module(facts, node.module or "", node.level)]
        if node.module is None or not named[0]:  # `from . import distributed`
            named += [
                project.module(facts, f"{node.module or ''}.{a.name}".lstrip("."), node.level)
                for a in node.names
            ]
    return [m for m in named if m is not None and m is not facts]


def _loads_torch(module: ScriptFacts, depth: int, seen: set[int]) -> bool:
    """Whether importing the module loads torch: itself at module level, or a module of the
    tree it imports at module level, up to `depth` hops."""
    if id(module) in seen or module.tree is None:
        return False
    seen.add(id(module))
    if any(t.ctx.module_level for t in module.torch_imports):
        return True
    if depth <= 1:
        return False
    return any(
        _loads_torch(target, depth - 1, seen)
        for node in module.tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target in _imported(module, node)
    )
