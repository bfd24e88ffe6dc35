"""Where a stored value is read back: which assignments reach a use (in source order, minus
other branches' and those overwritten on the way), which element of an unpacking a target
gets, which argument of a call binds a parameter, and a few shapes of stored values
(`os.environ.get("X")`, `{"k": v}`, `Config(**vars(args))`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ddp_doctor.script import names
from ddp_doctor.script.facts import Assignment, Context, Function


def copied_namespace(call: ast.Call) -> ast.expr | None:
    """`X(**vars(args))`: the namespace whose attributes the new object takes over."""
    for keyword in call.keywords:
        value = keyword.value
        if (
            keyword.arg is None
            and isinstance(value, ast.Call)
            and value.args
            and names.last_identifier(value.func) == "vars"
        ):
            return value.args[0]
    return None


def reaching(assignments: list[Assignment], ctx: Context, at: ast.AST | None) -> list[Assignment]:
    """The assignments whose value may still be there at `at`: earlier ones, not in another
    arm of a condition, and not overwritten by a later one that runs whenever `at` runs."""
    if at is None or not hasattr(at, "lineno"):
        return list(assignments)
    here = (at.lineno, at.col_offset)  # type: ignore[attr-defined]
    before = [a for a in assignments if end_of(a.node) <= here and not a.ctx.excludes(ctx)]
    return [
        a
        for a in before
        if not any(start_of(b.node) > start_of(a.node) and ctx.within(b.ctx) for b in before)
    ]


def kept_on_a_path(assignments: Iterable[Assignment], path: str, ctx: Context, at: ast.AST) -> bool:
    """`params.local_rank`, an attribute of a parameter, set in some arms of a condition
    only: the caller's value is still there on the other paths to `at`."""
    function = ctx.function
    if function is None or path.startswith("self."):
        return False
    if path.split(".", 1)[0] not in function.params:
        return False
    local = [a for a in assignments if a.ctx.function is function]
    return bool(local) and not on_every_path(reaching(local, ctx, at), ctx)


def on_every_path(assignments: list[Assignment], ctx: Context) -> bool:
    """Whether one of the assignments ran on every path to `ctx`: one runs whenever `ctx`
    runs, or every arm of a condition `ctx` does not sit in holds one. XLM's
    init_distributed_mode sets `params.local_rank` in the first and last arm of an if/elif/else
    and keeps the caller's value in the middle one: not on every path."""
    return _covers(assignments, {id(b.node): b.arm for b in ctx.branches}, 0)


def _covers(assignments: list[Assignment], taken: dict[int, bool], depth: int) -> bool:
    live = [
        a for a in assignments if all(taken.get(id(b.node), b.arm) == b.arm for b in a.ctx.branches)
    ]
    undecided = [[b for b in a.ctx.branches if id(b.node) not in taken] for a in live]
    if any(not rest for rest in undecided):
        return True
    if not live:
        return False
    if depth >= _SPLITS:
        return True  # too many conditions to tell: taken as stored, as before
    split = id(undecided[0][0].node)
    return all(_covers(live, {**taken, split: arm}, depth + 1) for arm in (True, False))


_SPLITS = 8


def final(assignments: list[Assignment]) -> list[Assignment]:
    """The assignments still in force when their function returns: `self.model = model.to(d)`
    then `self.model = DDP(self.model)` in __init__ leaves only the second for other methods."""
    return [
        a
        for a in assignments
        if not any(
            b.ctx.function is a.ctx.function
            and start_of(b.node) > start_of(a.node)
            and not b.ctx.branches
            for b in assignments
        )
    ]


def start_of(node: ast.AST) -> tuple[int, int]:
    return (node.lineno, node.col_offset)  # type: ignore[attr-defined]


def end_of(node: ast.AST) -> tuple[int, int]:
    return (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def element(value: ast.expr, index: tuple[int, ...]) -> ast.expr | None:
    """The part of `value` an unpacking target gets, or None when it cannot be told."""
    for position in index:
        if isinstance(value, (ast.Tuple, ast.List)) and position < len(value.elts):
            if any(isinstance(e, ast.Starred) for e in value.elts[: position + 1]):
                return None
            value = value.elts[position]
        else:
            return None
    return value


def argument(
    call: ast.Call, function: Function, index: int, name: str, bound: bool
) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    position = index - 1 if bound else index
    if position < 0:
        return None
    args = call.args
    if position < len(args) and not any(isinstance(a, ast.Starred) for a in args[: position + 1]):
        return args[position]
    return None


def default(function: Function, name: str) -> ast.expr | None:
    arguments = function.node.args
    positional = arguments.posonlyargs + arguments.args
    defaults = arguments.defaults
    offset = len(positional) - len(defaults)
    for position, argument in enumerate(positional):
        if argument.arg == name and position >= offset:
            return defaults[position - offset]
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=False):
        if argument.arg == name:
            return default
    return None


def env_name(call: ast.Call) -> str | None:
    """`os.environ.get("X")`, `os.getenv("X")`."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in ("get", "getenv") or not call.args:
        return None
    owner = names.dotted(func.value) or ""
    if not (owner == "os" or owner.endswith("environ")):
        return None
    key = call.args[0]
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def dict_value(node: ast.AST | None, key: object) -> ast.expr | None:
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=False):
            if isinstance(k, ast.Constant) and k.value == key:
                return v
    if isinstance(node, ast.Call) and names.last_identifier(node.func) == "dict":
        for keyword in node.keywords:
            if keyword.arg == key:
                return keyword.value
    return None
