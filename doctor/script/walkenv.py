"""What the walker records besides calls, loops and assignments: reads and writes of
environment variables (`os.environ["RANK"]`, `os.environ.get(...)`, `os.getenv(...)`),
print sent to os.devnull, and module-level aliases of torch names (split out of walker.py)."""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import Context, EnvAccess, ScriptFacts
from ddp_doctor.script.names import dotted, last_identifier
from ddp_doctor.script.walkshapes import is_environ

_ENV_GETTERS = frozenset({"get", "getenv", "setdefault", "pop", "putenv"})


def record_environ_subscript(
    facts: ScriptFacts,
    node: ast.Subscript,
    ctx: Context,
    *,
    writes: bool,
    value: ast.expr | None = None,
) -> None:
    """`os.environ["NAME"]`, read or (as an assignment's target) written."""
    key = node.slice
    if isinstance(key, ast.Constant) and type(key.value) is str and is_environ(node.value):
        facts.env.append(EnvAccess(key.value, node, ctx, writes, value))


def record_environ_call(facts: ScriptFacts, node: ast.Call, ctx: Context) -> None:
    """`os.environ.get("NAME")`, `os.getenv("NAME")`, `os.environ.setdefault("NAME", v)`."""
    func = node.func
    if not isinstance(func, ast.Attribute) or func.attr not in _ENV_GETTERS or not node.args:
        return
    if not (is_environ(func.value) or dotted(func.value) == "os"):
        return
    key = node.args[0]
    if isinstance(key, ast.Constant) and type(key.value) is str:
        writes = func.attr in ("setdefault", "putenv")
        value = node.args[1] if writes and len(node.args) > 1 else None
        facts.env.append(EnvAccess(key.value, node, ctx, writes, value))


def opens_devnull(value: ast.expr | None) -> bool:
    """`open(os.devnull, "w")`: print goes nowhere in the processes that run it."""
    return (
        isinstance(value, ast.Call)
        and last_identifier(value.func) == "open"
        and bool(value.args)
        and dotted(value.args[0]) == "os.devnull"
    )


def add_module_aliases(facts: ScriptFacts) -> None:
    """`DDP = torch.nn.parallel.DistributedDataParallel` at module level acts like an import."""
    for assignment in facts.assignments:
        if assignment.ctx.module_level and "." not in assignment.target:
            qualified = facts.imports.resolve(assignment.value)
            if qualified is not None and qualified.startswith("torch."):
                facts.imports.add_alias(assignment.target, qualified)
