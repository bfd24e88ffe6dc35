"""Rules about the training step under a wrapper: DataParallel losses, activation checkpointing."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule

from .. import names
from ..facts import Assignment, CallSite, ScriptFacts, position
from ..flow import flow_of
from ..hits import hit

_REDUCTIONS = frozenset({"mean", "sum"})


@rule(
    "DDP125",
    Remediation("Reduce the gathered losses first: loss = loss.mean(), then loss.backward()."),
)
def dataparallel_loss_not_reduced(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        loss.backward() where loss comes straight out of a DataParallel-wrapped model's output
        (outputs.loss, outputs[0], outputs["loss"], or the call itself) with no .mean() or
        .sum() on it in that function.
    Why it matters:
        DataParallel gathers one scalar per GPU into a vector ("Was asked to gather along
        dimension 0, but all input tensors were scalars"). backward() on that vector fails
        with "grad can be implicitly created only for scalar outputs", or, summed by hand,
        scales the gradient by the number of GPUs.
    Example:
        model = nn.DataParallel(model)
        loss = model(**batch).loss
        loss.backward()
    Fix:
        loss = model(**batch).loss.mean()
        loss.backward()
    """
    wrapped = _data_parallel_targets(facts)
    if not wrapped:
        return
    for call in facts.methods_called("backward"):
        loss = names.dotted(call.receiver) if call.receiver is not None else None
        if loss is None:
            continue
        origin = _latest_assignment(facts, loss, call)
        if origin is None or not _from_wrapped_output(facts, origin, wrapped):
            continue
        if _reduced(facts, loss, call):
            continue
        yield hit(
            facts,
            call.node,
            f"{loss} comes from the DataParallel model's output, one value per GPU; "
            f"call {loss}.mean() before backward()",
            {"loss": loss},
        )


def _data_parallel_targets(facts: ScriptFacts) -> set[str]:
    flow = flow_of(facts)
    return {
        target
        for site in facts.calls_to(names.DATA_PARALLEL)
        if (target := flow.target_of(site.node)) is not None
    }


def _latest_assignment(facts: ScriptFacts, name: str, before: CallSite) -> Assignment | None:
    found = [
        a
        for a in facts.assignments_by_target.get(name, ())
        if a.ctx.function is before.ctx.function and position(a) < position(before)
    ]
    return max(found, key=position) if found else None


def _from_wrapped_output(facts: ScriptFacts, origin: Assignment, wrapped: set[str]) -> bool:
    value: ast.expr = origin.value
    stripped = False
    while isinstance(value, (ast.Attribute, ast.Subscript)):
        value, stripped = value.value, True
    if isinstance(value, ast.Call):
        return names.dotted(value.func) in wrapped and (stripped or origin.target == "loss")
    if stripped and isinstance(value, ast.Name):
        output = _latest_assignment_at(facts, value.id, origin)
        return (
            output is not None
            and isinstance(output.value, ast.Call)
            and names.dotted(output.value.func) in wrapped
        )
    return False


def _latest_assignment_at(facts: ScriptFacts, name: str, origin: Assignment) -> Assignment | None:
    found = [
        a
        for a in facts.assignments_by_target.get(name, ())
        if a.ctx.function is origin.ctx.function and position(a) < position(origin)
    ]
    return max(found, key=position) if found else None


def _reduced(facts: ScriptFacts, loss: str, backward: CallSite) -> bool:
    for name in _REDUCTIONS:
        for call in facts.methods_called(name):
            if call.ctx.function is backward.ctx.function and names.dotted(call.receiver) == loss:  # type: ignore[arg-type]
                return True
    return False


@rule(
    "DDP126",
    Remediation(
        "Pass use_reentrant=False to torch.utils.checkpoint.checkpoint (or "
        "gradient_checkpointing_kwargs={'use_reentrant': False}), or wrap with "
        "DDP(..., static_graph=True)."
    ),
)
def reentrant_checkpoint_with_ddp(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        In a script that wraps in DDP (without static_graph=True): torch.utils.checkpoint's
        checkpoint()/checkpoint_sequential() without use_reentrant=False, and Hugging Face
        gradient_checkpointing_enable() without gradient_checkpointing_kwargs that set
        use_reentrant to False.
    Why it matters:
        Reentrant checkpointing runs a second backward inside DDP's backward. With unused
        parameters, shared weights or several checkpointed blocks DDP fails with "Expected to
        mark a variable ready only once" / "marked as ready twice".
    Example:
        out = checkpoint(self.block, x)
    Fix:
        out = checkpoint(self.block, x, use_reentrant=False)
    """
    flow = flow_of(facts)
    if not flow.ddp_wraps or any(_is_true(w.keyword("static_graph")) for w in flow.ddp_wraps):
        return
    for call in facts.calls_to(*names.CHECKPOINT):
        choice = call.keyword("use_reentrant")
        if choice is None or _is_true(choice):
            yield hit(facts, call.node, "checkpoint() without use_reentrant=False under DDP")
    for call in facts.methods_called("gradient_checkpointing_enable"):
        options = call.keyword("gradient_checkpointing_kwargs")
        if not _sets_non_reentrant(options):
            yield hit(
                facts,
                call.node,
                "gradient_checkpointing_enable() keeps the reentrant default under DDP",
            )


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _sets_non_reentrant(options: ast.expr | None) -> bool:
    if isinstance(options, ast.Dict):
        for key, value in zip(options.keys, options.values, strict=False):
            if isinstance(key, ast.Constant) and key.value == "use_reentrant":
                return isinstance(value, ast.Constant) and value.value is False
        return False
    if isinstance(options, ast.Call):
        return any(
            kw.arg == "use_reentrant"
            and isinstance(kw.value, ast.Constant)
            and kw.value.value is False
            for kw in options.keywords
        )
    return options is not None  # a variable: cannot tell, stay quiet
