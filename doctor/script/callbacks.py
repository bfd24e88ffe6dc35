"""Which functions of the tree a parameter is handed, when every caller in view says so.

The PyTorch distributed tutorial's `init_processes(rank, size, fn, backend)` inits the process
group and then calls `fn(rank, size)`, the function its caller handed in:
`Process(target=init_processes, args=(rank, size, run))`. When every call of the helper in the
tree names the function it hands in (a direct call, `Process`/`Thread(target=..., args=(...))`
or `mp.spawn(helper, args=(...))`, which passes the rank first), those functions can be judged
like any callee; one caller whose argument is not a function of the tree leaves it unknown.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.callgraph import CallGraph, Edge
from ddp_doctor.script.facts import Function

_TARGET_STARTERS = frozenset({"Process", "Thread"})


def handed_functions(graph: CallGraph, function: Function, param: str) -> list[Function] | None:
    """The functions of the tree bound to `param` of `function` at each of its calls, or None
    when the function has no caller in view or a caller hands in something unknown."""
    edges = graph.callers(function)
    if not edges:
        return None
    found: list[Function] = []
    for edge in edges:
        argument = _bound_argument(graph, edge, function, param)
        defined = (
            graph.project.definition(edge.facts, argument, edge.site.ctx)
            if isinstance(argument, (ast.Name, ast.Attribute))
            else None
        )
        if not isinstance(defined, Function):
            return None
        found.append(defined)
    return found


def _bound_argument(
    graph: CallGraph, edge: Edge, function: Function, param: str
) -> ast.expr | None:
    """The expression the call of `edge` binds to `param`, where the call's form says it."""
    call = edge.site.node
    if not edge.handed:
        return _bound(call.args, call.keywords, function, param, skip=0)
    forwarded = next((kw.value for kw in call.keywords if kw.arg == "args"), None)
    if edge.site.key in _TARGET_STARTERS:
        target = next((kw.value for kw in call.keywords if kw.arg == "target"), None)
        skip = 0
    elif (edge.facts.resolve(edge.site) or "") in names.SPAWN:
        target = call.args[0] if call.args else None
        forwarded = forwarded or (call.args[1] if len(call.args) > 1 else None)
        skip = 1  # mp.spawn hands the process index first
    else:
        return None  # handed to a call whose way of calling it is not known
    if not _names_function(graph, edge, target, function) or not isinstance(forwarded, ast.Tuple):
        return None
    return _bound(forwarded.elts, [], function, param, skip)


def _bound(
    args: list[ast.expr],
    keywords: list[ast.keyword],
    function: Function,
    param: str,
    skip: int,
) -> ast.expr | None:
    for keyword in keywords:
        if keyword.arg == param:
            return keyword.value
    arguments = function.node.args
    positional = [a.arg for a in arguments.posonlyargs + arguments.args]
    if function.class_name is not None and positional[:1] in (["self"], ["cls"]):
        return None  # a method: the receiver shifts the positions
    if param not in positional or any(isinstance(a, ast.Starred) for a in args):
        return None
    index = positional.index(param) - skip
    return args[index] if 0 <= index < len(args) else None


def _names_function(
    graph: CallGraph, edge: Edge, target: ast.expr | None, function: Function
) -> bool:
    if not isinstance(target, (ast.Name, ast.Attribute)):
        return False
    return graph.project.definition(edge.facts, target, edge.site.ctx) is function
