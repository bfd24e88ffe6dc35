"""Where a value goes before it is saved: `state = model.state_dict()`, then `checkpoint =
{"model": state, "epoch": epoch}` (or `checkpoint["model"] = state`), then
`torch.save(checkpoint, path)`. Followed through local names and the dict, list and tuple
displays that hold them, in one function, forward from the assignment; a call's result is a
new value (`len(state)` is no state dict), except one that is handed the value and whose result
is stored under the same name (`state = filter_trainable(model, state)`: the keys stay)."""

from __future__ import annotations

import ast
import re

from ddp_doctor.script import names
from ddp_doctor.script.facts import CallSite, ScriptFacts, position
from ddp_doctor.script.rankflow import contains
from ddp_doctor.script.wrappertests import tests_data_parallel_only


def saved_through_names(facts: ScriptFacts, call: CallSite, saves: list[CallSite]) -> bool:
    """Whether the call's result reaches a later save of the same function through names."""
    function = call.ctx.function
    same = [save for save in saves if save.ctx.function is function]
    if not same:
        return False
    assignments = sorted(
        (a for a in facts.assignments if not a.element and a.ctx.function is function),
        key=position,
    )
    start = next((a for a in assignments if contains(a.value, call.node)), None)
    if start is None or not _is_held_whole(start.value, call.node):
        return False
    held = {_root(start.target)}
    for assignment in assignments:
        if position(assignment) > position(start) and _carries(assignment.value, held):
            held.add(_root(assignment.target))
    return any(
        position(save) > position(start) and any(_root_of(arg) in held for arg in _arguments(save))
        for save in same
    )


def _is_held_whole(value: ast.expr, call: ast.Call) -> bool:
    """`state = model.state_dict()` or `ckpt = {"model": model.state_dict()}`, not
    `n = len(model.state_dict())`."""
    return value is call or _carries(value, set(), call)


def _carries(value: ast.expr | None, held: set[str], call: ast.AST | None = None) -> bool:
    if value is None:
        return False
    if value is call or (isinstance(value, ast.Name) and value.id in held):
        return True
    if isinstance(value, ast.Dict):
        return any(_carries(v, held, call) for v in value.values)
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return any(_carries(e, held, call) for e in value.elts)
    if isinstance(value, ast.Starred):
        return _carries(value.value, held, call)
    return False


def _arguments(save: CallSite) -> list[ast.expr]:
    return [*save.node.args, *(keyword.value for keyword in save.node.keywords)]


def _root_of(argument: ast.expr) -> str | None:
    text = names.dotted(argument)
    return _root(text) if text is not None else None


def _root(target: str) -> str:
    return re.split(r"[.\[]", target, maxsplit=1)[0]


_FSDP_PREFIX = "torch.distributed.fsdp."


def treated_as_fsdp(facts: ScriptFacts, call: CallSite, receiver: ast.expr) -> bool:
    """Earlier in the same arm the receiver is handed to an FSDP API
    (`FSDP.set_state_dict_type(model, StateDictType.FULL_STATE_DICT, ...)`, `with
    FSDP.state_dict_type(model, ...)`): there it is an FSDP module, whose full state dict has
    no "module." prefix, whatever another arm of the program holds."""
    text = names.dotted(receiver)
    if text is None or ("fsdp" not in facts.source and "FullySharded" not in facts.source):
        return False
    for site in facts.calls:
        if site.ctx.function is not call.ctx.function or position(site) >= position(call):
            continue
        if site.ctx.branches != call.ctx.branches[: len(site.ctx.branches)]:
            continue
        if not (facts.resolve(site) or "").startswith(_FSDP_PREFIX):
            continue
        if any(names.dotted(argument) == text for argument in _arguments(site)):
            return True
    return False


def in_data_parallel_only_arm(facts: ScriptFacts, call: CallSite, receiver: ast.expr) -> bool:
    """The call sits in the arm of `isinstance(x, nn.DataParallel)` that holds no
    DataParallel (`if isinstance(model, DataParallel): save(model.module...) else:
    save(model.state_dict())`, SimCLR's save_model), or its receiver was unwrapped by such a
    test (`raw = model.module if isinstance(model, DataParallel) else model`): DDP is no
    subclass of DataParallel, so a DDP wrapper takes the plain arm with its "module." keys."""
    path = names.access_path(receiver)
    for assignment in facts.assignments_by_target.get(path or "", ()):
        value = assignment.value
        if (
            isinstance(value, ast.IfExp)
            and assignment.ctx.function is call.ctx.function
            and position(assignment) < position(call)
            and tests_data_parallel_only(facts, _unnegated(value.test))
        ):
            return True
    for branch in call.ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is None:
            continue
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if branch.arm == negated and tests_data_parallel_only(facts, _unnegated(test)):
            return True
    return False


def _unnegated(test: ast.expr) -> ast.expr:
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    return test.operand if negated else test  # type: ignore[attr-defined]
