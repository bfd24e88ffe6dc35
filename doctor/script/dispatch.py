"""Calls of a module's function picked by name at run time: `getattr(module, NAME)(...)`, NAME
a constant or a string built around constant parts (`'init_dist_%s' % args.launcher`,
`f"init_dist_{launcher}"`, `"init_dist_" + launcher`, `"init_dist_{}".format(launcher)`).

OpenPCDet and the programs built on it (CaDDN, Voxel R-CNN ...) start their process group this
way: `getattr(common_utils, 'init_dist_%s' % args.launcher)(args.tcp_port, args.local_rank)`.
The call runs one of the module's functions whose names fit the pattern; all of them are its
targets (the call graph follows each, as it follows both arms of a condition).
"""

from __future__ import annotations

import ast
import re

from ddp_doctor.script.facts import CallSite, Function, ScriptFacts
from ddp_doctor.script.project import Project

_PLACEHOLDER = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sdr]|\{[^{}]*\}")


def is_getattr_call(site: CallSite) -> bool:
    """`getattr(obj, name)(...)`: the called expression is itself a two-argument getattr."""
    func = site.node.func
    return (
        isinstance(func, ast.Call)
        and isinstance(func.func, ast.Name)
        and func.func.id == "getattr"
        and len(func.args) >= 2
    )


def dispatched(project: Project, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...]:
    """The module-level functions of a module of the tree that `getattr(module, NAME)(...)`
    may run (nothing when the object is no module of the tree or NAME has no constant part)."""
    if not is_getattr_call(site):
        return ()
    getter = site.node.func
    assert isinstance(getter, ast.Call)
    pattern = name_pattern(getter.args[1])
    if pattern is None:
        return ()
    module = project.definition(facts, getter.args[0], site.ctx)
    if not isinstance(module, ScriptFacts):
        return ()
    return tuple(
        function
        for name, function in module.functions_by_qualname.items()
        if function.class_name is None and "." not in name and pattern.fullmatch(name)
    )


def name_pattern(expr: ast.expr) -> re.Pattern[str] | None:
    """A pattern of the names a string expression can spell, when it has a constant part
    other than placeholders (a name built of nothing constant could be any function)."""
    parts = _parts(expr)
    if parts is None or not any(p for p in parts if p is not None):
        return None
    return re.compile("".join(r"\w+" if p is None else re.escape(p) for p in parts))


def _parts(expr: ast.expr) -> list[str | None] | None:
    """The constant pieces of a string expression in order, None for a variable piece."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value]
    if isinstance(expr, ast.JoinedStr):
        return [
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else None
            for v in expr.values
        ]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
        return _template(expr.left)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        left, right = _parts(expr.left), _parts(expr.right)
        return (left or [None]) + (right or [None])
    func = expr.func if isinstance(expr, ast.Call) else None
    if isinstance(func, ast.Attribute) and func.attr == "format":
        return _template(func.value)
    return None


def _template(expr: ast.expr) -> list[str | None] | None:
    """`'init_dist_%s'` or `'init_dist_{}'`: the text around its placeholders."""
    if not (isinstance(expr, ast.Constant) and isinstance(expr.value, str)):
        return None
    found: list[str | None] = []
    for piece in _PLACEHOLDER.split(expr.value):
        found += [piece, None]
    return found[:-1]
