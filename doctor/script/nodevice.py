"""The arm where a process has no GPU index of its own.

The pytorch/examples imagenet structure (and moco, simsiam, swav ... copied from it) branches on
the GPU index: `if args.gpu is not None:` pins it and wraps with device_ids=[args.gpu]; the
other arm (`args.gpu is None`) calls a plain `.cuda()` and wraps without device_ids, so one
process drives the GPUs it sees. In that arm there is no per-process GPU for a checkpoint to
miss: the rules about one process per GPU (a torch.load onto the saving GPU, DDP118) do not
apply there; where that arm is taken under a launcher, the placement itself is the mistake
(DDP127), reported once.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import Context

_INDEX_WORDS = ("gpu", "device", "local_rank", "cuda")


def without_own_gpu(ctx: Context) -> bool:
    """Whether `ctx` lies in the arm of a test `X is None` (or the `else` of `X is not None`)
    where X names a GPU index: `args.gpu`, `gpu_id`, `local_rank`, `device_ids`."""
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        polarity = _none_test(test)
        if polarity is not None and polarity == branch.arm:
            return True
    return False


def _none_test(test: ast.expr | None) -> bool | None:
    """True for `X is None`, False for `X is not None`, None for anything else."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return None
    right = test.comparators[0]
    if not (isinstance(right, ast.Constant) and right.value is None):
        return None
    if not isinstance(test.left, (ast.Name, ast.Attribute)):
        return None
    name = (names.last_identifier(test.left) or "").lower()
    if not any(word in name for word in _INDEX_WORDS):
        return None
    if isinstance(test.ops[0], ast.Is):
        return True
    return False if isinstance(test.ops[0], ast.IsNot) else None
