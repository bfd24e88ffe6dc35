"""Loops that run their body once: a retry loop of one pass (DDP113).

`while batch_size > 0: try: evaluate(batch_size); break; except RuntimeError: batch_size //= 2`
(an out-of-memory retry; VMamba's analyze/eval.py) runs the pass again only after a failure:
the data is read once, not once per epoch. Such a loop ends its body, or the body of a `try`
there, with an unconditional `break`; an epoch loop breaks only under a condition (`if step >=
max_steps: break`).
"""

from __future__ import annotations

import ast

from ddp_doctor.script.callgraph import DEPTH, CallGraph
from ddp_doctor.script.facts import Context


def one_pass(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """The body ends in an unconditional `break`, itself or as the last step of a `try`."""
    for statement in loop.body:
        if isinstance(statement, ast.Break):
            return True
        if isinstance(statement, ast.Try) and any(isinstance(s, ast.Break) for s in statement.body):
            return True
    return False


def in_repeating_loop(graph: CallGraph, ctx: Context, depth: int = DEPTH) -> bool:
    """Inside a loop that runs more than one pass, or in a function called in one (at most
    `depth` calls up): graph.in_loop less the retry loops of one pass."""
    if any(not one_pass(loop.node) for loop in ctx.loops):
        return True
    if ctx.function is None or depth <= 0:
        return False
    return any(
        in_repeating_loop(graph, edge.site.ctx, depth - 1)
        for edge in graph.callers(ctx.function)
        if not edge.handed
    )
