"""Whether a condition asks if the GPUs (or NCCL) are there: the choice of a CPU fallback
that DDP106 looks for."""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import Context, ScriptFacts

_AVAILABILITY_CHECKS = ("is_nccl_available", "is_available", "device_count")
_PACKAGE_NAMES = frozenset({"dist", "distributed"})  # dist.is_available(): the package is built


def is_availability_call(node: ast.expr) -> bool:
    """torch.cuda.is_available(), dist.is_nccl_available(), device_count(); not
    dist.is_available() (whether torch was built with the distributed package)."""
    if (
        not isinstance(node, ast.Call)
        or names.last_identifier(node.func) not in _AVAILABILITY_CHECKS
    ):
        return False
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    owner = (names.dotted(receiver) or "") if receiver is not None else ""
    return not (node.func.attr == "is_available" and owner.split(".")[-1] in _PACKAGE_NAMES)  # type: ignore[union-attr]


def asks_availability(
    test: ast.expr, facts: ScriptFacts | None = None, ctx: Context | None = None
) -> bool:
    """The test calls an availability check, or (given where it is: an assert) uses a name
    assigned one in the same function (`n_gpus = torch.cuda.device_count(); assert n_gpus
    >= 2`). A branch on such a name only sizes the world."""
    for node in ast.walk(test):
        if is_availability_call(node):  # type: ignore[arg-type]
            return True
        if isinstance(node, ast.Name) and facts is not None and ctx is not None:
            for assignment in facts.assignments_by_target.get(node.id, ()):
                value = assignment.value  # the count itself, not `count() if cuda else 1`
                if assignment.ctx.function is ctx.function and _holds_the_count(value):
                    return True
    return False


def _holds_the_count(value: ast.expr | None) -> bool:
    """`torch.cuda.device_count()`, or the count written out with zero for no GPUs (ogb's
    `device_count() if torch.cuda.is_available() else 0`: still 0 without them); not
    `count() if cuda else 1`, which passes an assert on one process without GPUs."""
    if isinstance(value, ast.IfExp):
        arms = (value.body, value.orelse)
        return any(is_availability_call(arm) for arm in arms) and any(
            isinstance(arm, ast.Constant) and arm.value == 0 and arm.value is not False
            for arm in arms
        )
    return value is not None and is_availability_call(value)


def tests_a_cuda_device(test: ast.expr) -> bool:
    """The test compares a device with a CUDA one: `self.device != f"cuda:{local_rank}"`
    (rsl_rl's runner raises otherwise), `args.device == "cuda"`, `device.type != "cuda"`,
    `device.startswith("cuda")`: the code under it runs only on a configured GPU."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and _compares_with_cuda([node.left, *node.comparators]):
            return True
        if (
            isinstance(node, ast.Call)
            and names.last_identifier(node.func) == "startswith"
            and isinstance(node.func, ast.Attribute)
            and _names_a_device(node.func.value)
            and node.args
            and _cuda_text(node.args[0])
        ):
            return True
    return False


def _compares_with_cuda(sides: list[ast.expr]) -> bool:
    return any(_names_a_device(side) for side in sides) and any(_cuda_text(s) for s in sides)


def _names_a_device(node: ast.expr) -> bool:
    name = names.last_identifier(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return name is not None and ("device" in name.lower() or name == "type")


def _cuda_text(node: ast.expr) -> bool:
    """ "cuda", "cuda:0", f"cuda:{rank}"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("cuda")
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda")
    return False
