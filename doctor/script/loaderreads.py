"""How a loader held in a plain name is read: one batch, or one pass through one iterator.

`for batch in loader: show(batch); break` (a sanity check) and `next(iter(loader))` read one
batch. `batches = iter(loader)` made once, in no loop, then `next(batches)` at every step is
one pass over the data however many steps run (EasyOCR's CRAFT trainer reads its SynthText
loader so). An `iter(loader)` made again inside a loop (`except StopIteration: it =
iter(loader)`) is a new pass each time, and is not one.
"""

from __future__ import annotations

import ast
from enum import Enum

from ddp_doctor.script import names
from ddp_doctor.script.facts import Context, ScriptFacts

_WRAPPERS = frozenset({"enumerate", "tqdm"})


class Read(Enum):
    ONE_BATCH = "one batch"  # a loop left by an unconditional break, next(iter(loader))
    ONE_ITERATOR = "one iterator"  # iter(loader) outside any loop
    RETURNED = "returned"  # `return loader`: read by the caller
    OTHER = "other"


def reads(facts: ScriptFacts, ctx: Context, name: str) -> list[Read]:
    """Each read of the plain name in the scope of `ctx` (its function, or the module)."""
    scope = ctx.function.node if ctx.function is not None else facts.tree
    if scope is None:
        return [Read.OTHER]
    parents = {id(child): node for node in ast.walk(scope) for child in ast.iter_child_nodes(node)}
    return [
        _kind(node, parents, scope)
        for node in ast.walk(scope)
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
    ]


def reads_one_batch(facts: ScriptFacts, ctx: Context, name: str) -> bool:
    """Every read of the loader takes one batch at most (and there is one)."""
    found = reads(facts, ctx, name)
    return bool(found) and all(read is Read.ONE_BATCH for read in found)


def read_in_one_pass(facts: ScriptFacts, stores: list[tuple[Context, str]], handed: bool) -> bool:
    """The loader, held in these plain names (each with the scope that binds it), is read
    once through: every read is one batch or one iterator made outside any loop, or (with
    `handed`: the callers' names are among the stores) a return; at least one read takes
    data; and each scope runs once (called in no loop)."""
    found: list[Read] = []
    for ctx, name in stores:
        if "." in name or facts.project.graph.called_in_loop(ctx.function):
            return False
        found += reads(facts, ctx, name)
    allowed = {Read.ONE_BATCH, Read.ONE_ITERATOR} | ({Read.RETURNED} if handed else set())
    taken = any(read in (Read.ONE_BATCH, Read.ONE_ITERATOR) for read in found)
    return taken and all(read in allowed for read in found)


def _kind(node: ast.AST, parents: dict[int, ast.AST], scope: ast.AST) -> Read:
    parent = parents.get(id(node))
    while _wraps(parent, node):
        node, parent = parent, parents.get(id(parent))  # type: ignore[assignment]
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
        breaks = any(isinstance(statement, ast.Break) for statement in parent.body)
        return Read.ONE_BATCH if breaks else Read.OTHER
    if isinstance(parent, ast.Return):
        return Read.RETURNED
    if not (_call_of(parent, "iter") and parent.args == [node]):  # type: ignore[union-attr]
        return Read.OTHER
    outer = parents.get(id(parent))
    if _call_of(outer, "next") and outer.args[:1] == [parent]:  # type: ignore[union-attr]
        return Read.ONE_BATCH
    return Read.OTHER if _in_loop(parent, parents, scope) else Read.ONE_ITERATOR  # type: ignore[arg-type]


def _wraps(parent: ast.AST | None, node: ast.AST) -> bool:
    """`enumerate(loader)`, `tqdm(loader)`: the loop still reads the loader."""
    return (
        isinstance(parent, ast.Call)
        and names.last_identifier(parent.func) in _WRAPPERS
        and bool(parent.args)
        and parent.args[0] is node
    )


def _call_of(node: ast.AST | None, function: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == function
        and len(node.args) >= 1
    )


def _in_loop(node: ast.AST, parents: dict[int, ast.AST], scope: ast.AST) -> bool:
    current = parents.get(id(node))
    while current is not None and current is not scope:
        if isinstance(current, (ast.For, ast.AsyncFor, ast.While, ast.comprehension)):
            return True
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return True  # a nested function may be called many times
        current = parents.get(id(current))
    return False
