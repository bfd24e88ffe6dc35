"""Whether a device index is the global rank (DDP108): `torch.distributed.get_rank()`, the
RANK environment variable, a name that only ever holds one of them, or a call of a function
of the tree that returns one of them (or a constant fallback before the group exists).

The last is the rank getter of torchvision's detection references, copied by DETR and its
descendants (D-FINE's src/misc/dist_utils.py among them):

    def get_rank():
        if not is_dist_available_and_initialized():
            return 0
        return torch.distributed.get_rank()

    rank = get_rank()
    model = DDP(model, device_ids=[rank], output_device=rank)

A getter returning the LOCAL_RANK variable, the rank in a group (detectron2's comm.get_local_rank:
`dist.get_rank(group=_LOCAL_PROCESS_GROUP)`) or the rank taken modulo the GPU count is a local
index and stays silent, and so does `dist.get_rank()` in a file whose every init passes
`rank=` the LOCAL_RANK variable (MeloTTS's train.py): the group's rank is what the init was
given.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import Function, ScriptFacts

_DEPTH = 2  # getters followed through getters (`get_rank()` returning `_get_rank()`)


def holds_global_rank(facts: ScriptFacts, node: ast.expr) -> bool:
    """`rank` whose every assignment in the file is the global rank, or such a call itself."""
    if isinstance(node, ast.Call):
        return is_global_rank(facts, node)
    text = names.dotted(node)
    if text is None:
        return False
    assignments = facts.assignments_by_target.get(text, [])
    return bool(assignments) and all(is_global_rank(facts, a.value) for a in assignments)


def is_global_rank(facts: ScriptFacts, value: ast.expr, depth: int = _DEPTH) -> bool:
    if isinstance(value, ast.Call) and names.last_identifier(value.func) == "int" and value.args:
        value = value.args[0]
    if isinstance(value, ast.Call):
        if facts.qualname(value.func) == "torch.distributed.get_rank":
            # a group's rank is not the global; nor is the rank of a group started with
            # rank=LOCAL_RANK (MeloTTS): get_rank() returns what the init was given
            return not value.args and not value.keywords and not _started_with_local_rank(facts)
        if depth > 0 and _returns_global_rank(facts, value, depth):
            return True
        value = (
            value.args[0] if names.last_identifier(value.func) == "get" and value.args else value
        )
    key = value.slice if isinstance(value, ast.Subscript) else value
    return isinstance(key, ast.Constant) and key.value == "RANK"


def _started_with_local_rank(facts: ScriptFacts) -> bool:
    """Every init_process_group of the file passes rank= the LOCAL_RANK variable, directly or
    through a name that only ever holds it (`local_rank = int(os.environ["LOCAL_RANK"])`)."""
    inits = facts.calls_to(names.INIT_PROCESS_GROUP)
    return bool(inits) and all(_local_rank_value(facts, init.keyword("rank")) for init in inits)


def _local_rank_value(facts: ScriptFacts, value: ast.expr | None) -> bool:
    if value is None:
        return False
    text = names.dotted(value)
    held = facts.assignments_by_target.get(text, []) if text is not None else []
    values = [a.value for a in held] if held else [value]
    return all(_reads_local_rank(v) for v in values)


def _reads_local_rank(value: ast.expr) -> bool:
    return any(
        isinstance(node, ast.Constant) and node.value == "LOCAL_RANK" for node in ast.walk(value)
    )


def _returns_global_rank(facts: ScriptFacts, call: ast.Call, depth: int) -> bool:
    """A call of a function of the tree whose returns are the global rank, apart from
    constant fallbacks (`return 0` before the group is initialized)."""
    site = facts.site_of.get(id(call))
    if site is None:
        return False
    project = facts.project
    targets = project.graph.targets(facts, site)
    return bool(targets) and all(
        _getter(project.owner(target), target, depth - 1) for target in targets
    )


def _getter(owner: ScriptFacts, function: Function, depth: int) -> bool:
    returned = [r.value for r in _returns(function.node)]
    if any(value is None for value in returned):
        return False  # a bare `return`: not a getter
    ranks = [v for v in returned if not isinstance(v, ast.Constant)]
    return bool(ranks) and all(
        isinstance(v, ast.expr) and is_global_rank(owner, v, depth) for v in ranks
    )


def _returns(node: ast.AST) -> list[ast.Return]:
    """The function's own return statements (not those of functions defined inside it)."""
    found: list[ast.Return] = []
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.Return):
            found.append(child)
        stack.extend(ast.iter_child_nodes(child))
    return found
