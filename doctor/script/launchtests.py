"""Launch tests: which `if` tests hold only in a multi-process launch (DISTRIBUTED) or only
without one (SINGLE): `if args.distributed:`, `if world_size > 1:`, `if dist.is_initialized():`,
`if "LOCAL_RANK" in os.environ:`, `if args.local_rank != -1:`, and `not`, `and`, `or` around them.
"""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import DISTRIBUTED, SINGLE
from ddp_doctor.script.guards import MIRRORED, is_rank_like, signed_constant
from ddp_doctor.script.names import last_identifier

# Conditions about the launch itself: `if args.distributed:`, `if world_size > 1:`,
# `if dist.is_initialized():`, `if "LOCAL_RANK" in os.environ:`, `if args.local_rank != -1:`.
_DISTRIBUTED_FLAGS = frozenset(
    {
        "distributed",
        "is_distributed",
        "multiprocessing_distributed",
        "use_distributed",
        "ddp",
        "use_ddp",
        "is_ddp",
        "ddp_enabled",
        "distributed_training",
        "using_ddp",
        "multi_process",
    }
)
# The process group's state: true only in a launch, but `if not dist.is_initialized():
# dist.init_process_group(...)` is the launch's own start, not a single-process branch.
_GROUP_STATE = frozenset(
    {
        "is_initialized",
        "is_dist_avail_and_initialized",
        "dist_is_initialized",
        "is_dist_initialized",
    }
)
_WORLD_SIZES = frozenset({"world_size", "num_processes", "ddp_world_size", "nprocs", "world"})
_LAUNCH_ENV = frozenset({"LOCAL_RANK", "RANK", "WORLD_SIZE", "SLURM_PROCID"})
_TRUE_IN_A_LAUNCH = _DISTRIBUTED_FLAGS | _GROUP_STATE


def launch_of(test: ast.expr) -> str | None:
    """DISTRIBUTED when the test holds only in a multi-process launch, SINGLE when only
    without one, None when it says nothing about the launch."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        if (last_identifier(test.operand) or "").lower() in _GROUP_STATE:
            return None
        return other_launch(launch_of(test.operand))
    if isinstance(test, ast.BoolOp):
        kinds = [launch_of(value) for value in test.values]
        known = set(kinds) - {None}
        if isinstance(test.op, ast.And):  # every part must hold: one telling part decides
            return known.pop() if len(known) == 1 else None
        if known == {SINGLE}:  # `world_size == 1 or not multi_gpus`: taken without a launch
            return SINGLE
        return known.pop() if len(known) == 1 and None not in kinds else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _launch_compare(test.left, test.ops[0], test.comparators[0])
    name = last_identifier(test)
    if name is not None and name.lower() in _TRUE_IN_A_LAUNCH:
        return DISTRIBUTED
    return None


def other_launch(launch: str | None) -> str | None:
    return _OTHER_LAUNCH.get(launch) if launch else None


_OTHER_LAUNCH = {DISTRIBUTED: SINGLE, SINGLE: DISTRIBUTED}


def launch_of_arm(test: ast.expr, arm: bool) -> str | None:
    """The launch an arm of `if test:` runs under. The false arm of a process-group state
    test (`if dist.is_initialized(): return`, then init) says nothing: a group not started
    yet is the normal state of a launched program before its own init."""
    launch = launch_of(test)
    return launch if arm else _false_arm(test, launch)


def launch_of_arms(test: ast.expr) -> tuple[str | None, str | None]:
    """launch_of_arm for the true and the false arm, the test read once."""
    launch = launch_of(test)
    return launch, _false_arm(test, launch)


def _false_arm(test: ast.expr, launch: str | None) -> str | None:
    if launch is None:
        return None
    if (last_identifier(test) or "").lower() in _GROUP_STATE:
        return None
    return other_launch(launch)


def _launch_compare(left: ast.expr, op: ast.cmpop, right: ast.expr) -> str | None:
    if isinstance(op, (ast.In, ast.NotIn)):
        if isinstance(left, ast.Constant) and left.value in _LAUNCH_ENV and _is_environ(right):
            return DISTRIBUTED if isinstance(op, ast.In) else SINGLE
        return None
    value, subject = signed_constant(right), left
    if value is None:
        value, subject = signed_constant(left), right
        op = MIRRORED.get(type(op), op)
    if value is None:
        return None
    name = (last_identifier(_unwrap_int(subject)) or "").lower()
    if name in _WORLD_SIZES or _is_env_read(subject, "WORLD_SIZE"):
        if (isinstance(op, ast.Gt) and value == 1) or (isinstance(op, ast.GtE) and value == 2):
            return DISTRIBUTED
        if isinstance(op, (ast.Eq, ast.LtE)) and value == 1:
            return SINGLE
        return None
    if value == -1 and is_rank_like(subject):  # args.local_rank == -1: no launcher
        if isinstance(op, (ast.Eq, ast.Is)):
            return SINGLE
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return DISTRIBUTED
    return None


def _unwrap_int(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.Call) and last_identifier(node.func) == "int" and node.args:
        return node.args[0]
    return node


def _is_env_read(node: ast.expr, name: str) -> bool:
    node = _unwrap_int(node)
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == name
    if isinstance(node, ast.Call) and last_identifier(node.func) in ("get", "getenv"):
        return (
            bool(node.args)
            and isinstance(node.args[0], ast.Constant)
            and (node.args[0].value == name)
        )
    return False


def _is_environ(node: ast.AST) -> bool:
    name = last_identifier(node)
    return name == "environ"
