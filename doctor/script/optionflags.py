"""The option a branch's test turns on or off, for the launch flags of region.py: a name
(`if cfg.enable_fsdp:`) or a count of processes compared with one (`if n_gpus > 1:`)."""

from __future__ import annotations

import ast

from ddp_doctor.script import names


def flag_of(test: ast.expr | None) -> tuple[str | None, bool]:
    """`if cfg.enable_fsdp:` -> ("enable_fsdp", True); `if not ddp:` -> ("ddp", False)."""
    holds = True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, holds = test.operand, False
    if isinstance(test, (ast.Name, ast.Attribute)):
        return names.last_identifier(test), holds
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _count_test(test.left, test.ops[0], test.comparators[0], holds)
    return None, holds


_SEVERAL = {ast.Gt: 1, ast.GtE: 2, ast.NotEq: 1}  # `n_gpus > 1`, `>= 2`, `!= 1`: several
_ONE = {ast.Eq: 1, ast.LtE: 1, ast.Lt: 2}  # `n_gpus == 1`, `<= 1`, `< 2`: one


def _count_test(
    left: ast.expr, op: ast.cmpop, right: ast.expr, holds: bool
) -> tuple[str | None, bool]:
    """`if n_gpus > 1:` -> ("n_gpus > 1", True), `if n_gpus == 1:` -> ("n_gpus > 1", False): a
    count of processes or GPUs, when the init runs only where it is above one (DGL's vrgcn:
    `if n_gpus > 1: init_process_group(...)`, `else: init_history(...)` in one process)."""
    subject = names.last_identifier(left)
    if subject is None or not isinstance(right, ast.Constant) or type(right.value) is not int:
        return None, holds
    if _SEVERAL.get(type(op)) == right.value:
        return f"{subject} > 1", holds
    if _ONE.get(type(op)) == right.value:
        return f"{subject} > 1", not holds
    return None, holds
