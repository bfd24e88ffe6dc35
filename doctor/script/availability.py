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
                if assignment.ctx.function is ctx.function and is_availability_call(value):
                    return True
    return False
