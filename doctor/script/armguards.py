"""The ranks the false arm of a rank test runs on: the `else` of `if test:`, and the rest of a
block after an early exit (`if test: return`).

The false arm of `rank != 0` runs on rank 0 only, but that of a conjunction does only when
every operand is a rank test or a launch test that holds in every rank of a launch (`if
args.distributed and rank != 0: return`): an operand that can be false on any rank lets
every rank through (waveglow's `if num_gpus == 1 and args.rank != 0: raise ...`, a sanity
check of the one-GPU run, or `if rank == 0 and step % 10 == 0: log() else: ...`)."""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ddp_doctor.script import guards, launchtests
from ddp_doctor.script.facts import DISTRIBUTED


def false_arm_polarity(test: ast.expr, flags: Mapping[str, str] | None = None) -> str | None:
    """ZERO where the test fails only on rank 0, NONZERO where only off it, None otherwise."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return guards.classify(test.operand, flags)
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return guards.flip(guards.classify(test, flags))
    kinds = set()
    for value in test.values:
        polarity = guards.classify(value, flags)
        if polarity is not None:
            kinds.add(polarity)
        elif launchtests.launch_of(value) != DISTRIBUTED:
            return None  # false on some rank for a reason of its own: every rank gets through
    return guards.flip(kinds.pop()) if len(kinds) == 1 else None
