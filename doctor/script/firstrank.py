"""Code that rank 0 runs first while the other ranks wait: `with
torch_distributed_zero_first(rank):` (yolov5/yolov7), `with accelerator.main_process_first():`,
`with training_args.main_process_first():` (Hugging Face). Rank 0 prepares a cache there and
the others, let through after it, find it made: a file written there when it is missing is
written once, by rank 0.
"""

from __future__ import annotations

import ast
import re

from ddp_doctor.script import names
from ddp_doctor.script.callgraph import DEPTH
from ddp_doctor.script.facts import Context, ScriptFacts

_FIRST_RANK = re.compile(r"zero_first|main_process_first|rank_?(0|zero)_first|local_rank_first")

Block = tuple[int, int, int]  # id of the enclosing function node (0: module), first, last line


def first_rank_blocks(facts: ScriptFacts) -> list[Block]:
    """The with-blocks of the file that let rank 0 through first (computed once)."""
    cached = facts.__dict__.get("_first_rank_blocks")
    if cached is not None:
        return cached
    found: list[Block] = []
    if facts.tree is not None and _FIRST_RANK.search(facts.source):
        for function in [None, *facts.functions]:
            scope = facts.tree if function is None else function.node
            for node in ast.walk(scope):
                if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                    _lets_rank_zero_first(item.context_expr) for item in node.items
                ):
                    found.append((id(scope) if function else 0, node.lineno, node.end_lineno or 0))
    facts.__dict__["_first_rank_blocks"] = found
    return found


def _lets_rank_zero_first(expr: ast.expr) -> bool:
    name = names.last_identifier(expr) if isinstance(expr, ast.Call) else None
    return name is not None and _FIRST_RANK.search(name) is not None


def in_first_rank_block(facts: ScriptFacts, ctx: Context, line: int) -> bool:
    scope = id(ctx.function.node) if ctx.function is not None else 0
    return any(s == scope and first <= line <= last for s, first, last in first_rank_blocks(facts))


def prepared_by_rank_zero_first(facts: ScriptFacts, ctx: Context, line: int) -> bool:
    """The line runs inside such a block, directly or in a function that every call of the
    tree reaches only from inside one (a few calls up: the dataset built there, whose
    __init__ writes the label cache), and on the way it is an arm of a test whether a file
    exists (`if cache_path.is_file(): load else: write`): only the first rank finds it
    missing."""
    return _reached_inside(facts, ctx, line, DEPTH, _tests_a_file(ctx))


def _reached_inside(facts: ScriptFacts, ctx: Context, line: int, depth: int, tested: bool) -> bool:
    if in_first_rank_block(facts, ctx, line):
        return tested
    if ctx.function is None or depth <= 0:
        return False
    graph = facts.project.graph
    edges = [e for e in graph.callers(ctx.function) if not e.handed]
    return bool(edges) and all(
        _reached_inside(
            e.facts, e.site.ctx, e.site.node.lineno, depth - 1, tested or _tests_a_file(e.site.ctx)
        )
        for e in edges
    )


_FILE_TESTS = frozenset({"exists", "is_file", "isfile", "isdir", "is_dir"})


def _tests_a_file(ctx: Context) -> bool:
    return any(
        isinstance(node, ast.Call) and names.last_identifier(node.func) in _FILE_TESTS
        for branch in ctx.branches
        for node in ast.walk(getattr(branch.node, "test", None) or ast.Pass())
    )
