"""Flags that turn the distributed path off without GPUs (DDP106's fallback held in a value).

maskrcnn-benchmark's entry points, and the many scripts copied from them, decide once:

    args.distributed = num_gpus > 1
    if not args.no_cuda and torch.cuda.is_available():
        args.device = "cuda"
    else:
        args.distributed = False
    if args.distributed:
        dist.init_process_group(backend="nccl")

NCCL is then never chosen without CUDA: the flag guarding the init is set false on the path
the availability check rules out. The flag is followed by the tree's data flow (values.py),
not by its name: any flag guarding the init counts when one of its values is a false
constant stored under an availability check, or when it is stored from such a check
(`distributed = torch.cuda.device_count() > 1`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.script.availability import asks_availability
from ddp_doctor.script.facts import Context, ScriptFacts
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.origins import CONSTANT, Origin


def guarded_by_gpu_flag(facts: ScriptFacts, ctx: Context) -> bool:
    """A condition around this place is true only where CUDA was found (see the module)."""
    values = facts.project.values
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is None or not branch.arm:
            continue
        for flag in _flags(test):
            if any(_off_without_gpus(o) for o in values.origins(facts, flag, ctx)):
                return True
    return False


def _flags(test: ast.expr) -> Iterator[ast.expr]:
    """The names a true test requires: `flag`, `args.distributed`, each operand of an `and`."""
    if isinstance(test, (ast.Name, ast.Attribute)):
        yield test
    elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            yield from _flags(value)


def _off_without_gpus(origin: Origin) -> bool:
    if origin.facts is None or not isinstance(origin.node, ast.expr):
        return False
    assignment = flow_of(origin.facts).assignment_of(origin.node)
    if assignment is None:
        return False
    if origin.kind == CONSTANT:
        value = origin.node.value  # type: ignore[attr-defined]
        return not value and _under_check(assignment.ctx)
    whole = assignment.value is origin.node and _is_boolean(origin.node)
    return whole and asks_availability(origin.node, origin.facts, assignment.ctx)


def _under_check(ctx: Context) -> bool:
    return any(
        asks_availability(test)
        for branch in ctx.branches
        if (test := getattr(branch.node, "test", None)) is not None
    )


def _is_boolean(node: ast.expr) -> bool:
    """A comparison, a negation or an availability call: a yes/no about the GPUs, not a count
    (`world_size = torch.cuda.device_count()` sizes the world)."""
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.Not)
    if isinstance(node, ast.Call):
        return getattr(node.func, "attr", getattr(node.func, "id", "")).startswith("is_")
    return isinstance(node, (ast.Compare, ast.BoolOp))
