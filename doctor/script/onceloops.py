"""Loops that run once per configured item rather than once per step (DDP119): a pass over
a list of names that the body dispatches on, over a configured list written as one string,
and a retry loop of one pass."""

from __future__ import annotations

import ast
import re

from ddp_doctor.script import names


def dispatches_on_names(loop: ast.For | ast.AsyncFor) -> bool:
    """`for name in name_list: if name == "LASOT": ...`: the loop variable is compared with
    string constants, so it walks a list of configured names (datasets, models) and each
    pass builds one of them; a step or a batch is never a name."""
    target = loop.target.id if isinstance(loop.target, ast.Name) else None
    if target is None:
        return False
    return any(
        isinstance(node, ast.If) and _names_compared(node.test, target)
        for statement in loop.body
        for node in ast.walk(statement)
    )


def splits_a_setting(loop: ast.For | ast.AsyncFor, configuration: re.Pattern[str]) -> bool:
    """`for checkpoint_key in args.checkpoint_key.split(','):`: a list of configured items
    given as one option string (DINO's and iBOT's evaluation scripts evaluate each key in
    turn); a pass per item, as many as the user typed, never one per step. Only a string
    split of a setting itself counts (`args.x.split(",")`, `cfg["names"].split()`), not of
    what a setting names (`open(args.list).read().split()`: a file's lines are items)."""
    source = loop.iter
    if not isinstance(source, ast.Call) or names.last_identifier(source.func) != "split":
        return False
    if not isinstance(source.func, ast.Attribute):
        return False
    root = _setting_root(source.func.value)
    return root is not None and configuration.fullmatch(root) is not None


def _setting_root(value: ast.expr) -> str | None:
    """`args` of `args.checkpoint_key`, `cfg` of `self.cfg.names`; None for a call, a bare name
    or `self.cfg` alone (a setting is an attribute of its root)."""
    chain = names.member_chain(value)
    return chain[0] if len(chain) > 1 else None


def _names_compared(test: ast.expr, target: str) -> bool:
    """`name == "LASOT"` (either side) in the test."""
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ast.Eq):
            continue
        sides = [node.left, node.comparators[0]]
        if any(isinstance(s, ast.Name) and s.id == target for s in sides) and any(
            isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides
        ):
            return True
    return False


def runs_once(loop: ast.For | ast.AsyncFor | ast.While, scope: ast.AST | None) -> bool:
    """`num_tries = 1; for i in range(num_tries): try: ...`: a retry loop of one pass."""
    source = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else None
    if not isinstance(source, ast.Call) or names.last_identifier(source.func) != "range":
        return False
    if len(source.args) != 1 or scope is None:
        return False
    count = source.args[0]
    if isinstance(count, ast.Name):
        values = [
            node.value
            for node in ast.walk(scope)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == count.id for t in node.targets)
        ]
        count = values[0] if len(values) == 1 else count
    return isinstance(count, ast.Constant) and count.value == 1
