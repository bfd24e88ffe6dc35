"""What the callers of a helper pass to its parameters, call path by call path, and which of
those paths reach one arm of a condition on a parameter.

A loader factory of the dinov2 shape builds a different sampler per arm
(`elif type == SamplerType.DISTRIBUTED: return DistributedSampler(ds, shuffle=shuffle)`);
the shuffle that arm gets is what the callers that choose it pass, not what any caller
passes. Paths are followed a few calls up (a parameter handed on unchanged to the next
helper: `_make_sampler(type=sampler_type, shuffle=shuffle)`); a path whose value is not in
view binds None (unknown).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.script import names, reaching
from ddp_doctor.script.callgraph import CallGraph, Edge
from ddp_doctor.script.facts import CallSite, Context, Function

_HOPS = 3
_MAX_PATHS = 64

Binding = dict[str, ast.expr | None]


def paths_binding(graph: CallGraph, function: Function, wanted: tuple[str, ...]) -> list[Binding]:
    """One binding of the `wanted` parameters per call path into `function` (its defaults
    when nothing in the tree calls it), at most _MAX_PATHS."""
    found: list[Binding] = []
    for binding in _bindings(graph, function, wanted, _HOPS):
        found.append(binding)
        if len(found) >= _MAX_PATHS:
            break
    return found


def _bindings(
    graph: CallGraph, function: Function, wanted: tuple[str, ...], hops: int
) -> Iterator[Binding]:
    edges = [e for e in graph.callers(function) if not e.handed]
    if not edges:
        yield {name: reaching.default(function, name) for name in wanted}
        return
    bound = (
        function.class_name is not None
        and bool(function.params)
        and function.params[0]
        in (
            "self",
            "cls",
        )
    )
    for edge in edges:
        local: Binding = {}
        for name in wanted:
            index = function.params.index(name)
            value = reaching.argument(edge.site.node, function, index, name, bound)
            if value is None:
                value = reaching.default(function, name)
            local[name] = _set_once(edge, value) if isinstance(value, ast.Name) else value
        caller = edge.caller
        handed_on = {
            name: value.id
            for name, value in local.items()
            if isinstance(value, ast.Name) and value.id in caller.params
        }
        if not handed_on or hops <= 0:
            yield {n: (None if n in handed_on else v) for n, v in local.items()}
            continue
        for outer in _bindings(graph, caller, tuple(sorted(set(handed_on.values()))), hops - 1):
            yield {n: outer[handed_on[n]] if n in handed_on else v for n, v in local.items()}


def _set_once(edge: Edge, value: ast.Name) -> ast.expr:
    """`sampler_type = SamplerType.SHARDED_INFINITE`, then `make_data_loader(sampler_type=
    sampler_type)`: a local name the caller's function assigns once stands for its value."""
    if value.id in edge.caller.params:
        return value
    stores = [
        a
        for a in edge.facts.assignments_by_target.get(value.id, ())
        if a.ctx.function is edge.site.ctx.function and not a.element and not a.index
    ]
    return stores[0].value if len(stores) == 1 and stores[0].value is not None else value


def arm_choices(ctx: Context, function: Function) -> list[tuple[str, ast.expr]]:
    """`(param, value)` for each `if param == value:` (or elif) whose true arm holds `ctx`."""
    choices: list[tuple[str, ast.expr]] = []
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if not branch.arm or not isinstance(test, ast.Compare) or len(test.ops) != 1:
            continue
        if not isinstance(test.ops[0], ast.Eq):
            continue
        left, right = test.left, test.comparators[0]
        if isinstance(right, ast.Name) and right.id in function.params:
            left, right = right, left
        if isinstance(left, ast.Name) and left.id in function.params and _is_choice(right):
            choices.append((left.id, right))
    return choices


def may_equal(value: ast.expr | None, choice: ast.expr) -> bool:
    """Whether a bound value may be the choice: unknown values may; two different constants
    or enum members (`SamplerType.EPOCH` against `SamplerType.DISTRIBUTED`) may not."""
    if value is None or not _is_choice(value):
        return True
    return _choice_text(value) == _choice_text(choice)


def _is_choice(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, int)) and not isinstance(node.value, bool)
    return isinstance(node, ast.Attribute) and names.dotted(node) is not None


def _choice_text(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return repr(node.value)
    return ".".join((names.dotted(node) or "").split(".")[-2:])  # SamplerType.DISTRIBUTED


def reaching_bindings(graph: CallGraph, site: CallSite, wanted: tuple[str, ...]) -> list[Binding]:
    """The bindings of the call paths that reach the site's arm of every `if param == X:`
    around it (all paths when there is none)."""
    function = site.ctx.function
    if function is None:
        return []
    choices = arm_choices(site.ctx, function)
    params = tuple(sorted({*wanted, *(name for name, _ in choices)}))
    return [
        binding
        for binding in paths_binding(graph, function, params)
        if all(may_equal(binding[name], choice) for name, choice in choices)
    ]
