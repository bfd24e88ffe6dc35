"""What a value holds when the user passes nothing: the default of an argparse option
(`parser.add_argument('--dist-backend', default='nccl')` behind `args.dist_backend`) and the
default of a parameter that no call of the tree passes (`def setup(backend='nccl')`).

The data flow (values.py) stops at an option or an uncalled parameter, since the user may pass
anything there; a rule that judges what the program does as written (DDP106: the backend the
program starts with) asks `with_defaults` instead, which follows those two to their defaults.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import reaching
from ddp_doctor.script.facts import CallSite, Context, Function, ScriptFacts
from ddp_doctor.script.origins import CONSTANT, OPTION, PARAM, Origin
from ddp_doctor.script.values import Values


def with_defaults(
    values: Values, facts: ScriptFacts, expr: ast.AST, ctx: Context, *, parameters: bool = True
) -> set[Origin]:
    """The value's origins, an option (and, unless `parameters` is False, a parameter no call
    of the tree passes) replaced by its default's."""
    found: set[Origin] = set()
    for origin in values.origins(facts, expr, ctx):
        default = _default_of(values, origin) if parameters or origin.kind == OPTION else None
        if default is None:
            found.add(origin)
            continue
        owner, node, where = default
        found |= values.origins(owner, node, where)
    return found


def _default_of(values: Values, origin: Origin) -> tuple[ScriptFacts, ast.expr, Context] | None:
    if origin.facts is None:
        return None
    if origin.kind == OPTION:
        site = option_declaration(values, origin.facts, origin.name)
        default = site.keyword("default") if site is not None else None
        if site is None or default is None:
            return None
        owner = _owner_of(values, origin.facts, site)
        return owner, default, site.ctx
    if origin.kind == PARAM and isinstance(origin.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = values.project.functions_by_node.get(id(origin.node))
        default = reaching.default(function, origin.name) if function is not None else None
        if default is None or (isinstance(default, ast.Constant) and default.value is None):
            return None
        return values.project.owner(function), default, function_context(function)
    return None


def function_context(function: Function) -> Context:
    return Context(function=function, class_name=function.class_name)


def option_declaration(values: Values, facts: ScriptFacts, dest: str) -> CallSite | None:
    """The add_argument call that declares `dest`: in the file that parses the arguments
    first, else the one declaration of the tree (none where files disagree)."""
    here = _declarations(facts, dest)
    if here:
        return here[-1]
    found = [
        s for f in values.project.files.values() if f is not facts for s in _declarations(f, dest)
    ]
    defaults = {ast.dump(d) if (d := s.keyword("default")) is not None else "" for s in found}
    return found[-1] if found and len(defaults) == 1 else None


def _declarations(facts: ScriptFacts, dest: str) -> list[CallSite]:
    return [c for c in facts.methods_called("add_argument") if option_dest(c.node) == dest]


def option_dest(call: ast.Call) -> str | None:
    """argparse's dest: `dest=`, else the first long option, else the first one, '-' -> '_'."""
    for keyword in call.keywords:
        if keyword.arg == "dest" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    strings = [
        a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
    ]
    if not strings:
        return None
    long = [s for s in strings if s.startswith("--")]
    chosen = long[0] if long else strings[0]
    return chosen.lstrip("-").replace("-", "_") or None


def _owner_of(values: Values, facts: ScriptFacts, site: CallSite) -> ScriptFacts:
    if any(s is site for s in facts.methods_called("add_argument")):
        return facts
    for other in values.project.files.values():
        if any(s is site for s in other.methods_called("add_argument")):
            return other
    return facts


def never_taken(values: Values, facts: ScriptFacts, ctx: Context) -> bool:
    """Whether `ctx` lies in the true arm of a test on a plain name that only ever holds a
    false constant: `def display(self, batch, enable_print=False): if enable_print: print(...)`
    with no caller passing enable_print. Such code never runs."""
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if not branch.arm or not isinstance(test, ast.Name):
            continue
        origins = values.origins(facts, test, ctx)
        if origins and all(
            o.kind == CONSTANT and isinstance(o.node, ast.Constant) and not o.node.value
            for o in origins
        ):
            return True
    return False
