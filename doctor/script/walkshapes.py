"""The shapes the walker recognises in a statement or expression: strings worth keeping, the
child fields of an expression type, an arm of a condition, `os.environ`, the main guard."""

from __future__ import annotations

import ast

from ddp_doctor.script import launchtests
from ddp_doctor.script.facts import Branch, Context
from ddp_doctor.script.names import dotted

# Strings worth keeping for rules that look at text (launch commands, renamed NCCL variables).
_STRING_MARKS = ("NCCL_", "torch.distributed.launch", "distributed/launch")


def marked(text: str) -> bool:
    """One of _STRING_MARKS in it (two substring tests first: most strings have neither)."""
    return ("NCCL_" in text or "launch" in text) and any(mark in text for mark in _STRING_MARKS)


_NOT_CHILDREN = frozenset(
    {"ctx", "op", "ops", "type_comment", "kind", "conversion", "is_async", "attr", "arg", "id"}
)


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of an expression type that hold expressions (not `ctx`, `op`, flags)."""
    return tuple(name for name in kind._fields if name not in _NOT_CHILDREN)  # type: ignore[attr-defined]


def in_arm(ctx: Context, node: ast.AST, test: ast.expr, *, arm: bool) -> Context:
    """The context of one arm of a condition; a test about the launch sets `launch`."""
    return _arm_context(ctx, node, arm, launchtests.launch_of_arm(test, arm))


def in_arms(ctx: Context, node: ast.AST, test: ast.expr) -> tuple[Context, Context]:
    """in_arm for the true and the false arm (the test read once)."""
    true_launch, false_launch = launchtests.launch_of_arms(test)
    return _arm_context(ctx, node, True, true_launch), _arm_context(ctx, node, False, false_launch)


def _arm_context(ctx: Context, node: ast.AST, arm: bool, launch: str | None) -> Context:
    return Context(
        ctx.function,
        ctx.class_name,
        ctx.loops,
        ctx.guard,
        ctx.main_guard,
        ctx.no_grad,
        (*ctx.branches, Branch(node, arm)),
        launch if launch is not None else ctx.launch,
    )


def is_environ(node: ast.AST) -> bool:
    text = dotted(node)
    return text is not None and (text == "environ" or text.endswith(".environ"))


def is_main_guard(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    sides = {dotted(test.left), dotted(test.comparators[0])}
    constants = [s.value for s in (test.left, test.comparators[0]) if isinstance(s, ast.Constant)]
    return "__name__" in sides and "__main__" in constants
