"""Rules about the training step under a wrapper: DataParallel losses, activation checkpointing."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.facts import Assignment, CallSite, ScriptFacts, position, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.origins import CALL, Origin
from ddp_doctor.script.placement import device_index

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
    "DDP128",
    Remediation(
        "Move inputs and targets to device_ids[0] (cuda:0 by default), or leave the inputs on "
        "the CPU: DataParallel scatters them itself."
    ),
)
def dataparallel_input_off_first_device(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        In a script that runs a model with nn.DataParallel, tensors (inputs, targets) moved
        with .to()/.cuda() to a literal GPU (directly or through a name or a torch.device)
        other than the wrapper's first device: device_ids[0], or cuda:0 when device_ids is
        not given (output_device, when given, is also accepted). And the model (or the
        wrapper) moved to a literal GPU other than device_ids[0] and never to device_ids[0]:
        DataParallel needs the module's parameters there. A model left on the CPU is DDP109's.
    Why it matters:
        DataParallel gathers the outputs on device_ids[0]. A target on another GPU meets them
        in the loss: "Expected all tensors to be on the same device, but found at least two
        devices, cuda:1 and cuda:0!". Inputs sent elsewhere are copied back to device_ids[0]
        before the scatter: wasted transfers, or the same error in code that mixes them.
    Example:
        model = nn.DataParallel(model.cuda())
        inputs, targets = inputs.to("cuda:1"), targets.to("cuda:1")
    Fix:
        inputs, targets = inputs.to("cuda:0"), targets.to("cuda:0")
    """
    wraps = facts.calls_to(names.DATA_PARALLEL)
    accepted = _first_devices(facts, wraps)
    if not accepted:
        return
    models = _models(facts, wraps)
    yield from _module_off_first_device(facts, wraps, models)
    for name in ("to", "cuda"):
        for move in facts.methods_called(name):
            device = move.argument(0, "device")
            if device is None or move.receiver is None:
                continue
            index = device_index(facts, device, move.ctx)
            if index is None or index in accepted:
                continue
            if _moves_model(facts, move, models):
                continue
            first = min(accepted)
            yield hit(
                facts,
                move.node,
                f"{text_of(move.node)} sends a tensor to cuda:{index}, but DataParallel "
                f"gathers on cuda:{first}",
                {"device": index, "first_device": first},
            )


def _moves_model(facts: ScriptFacts, move: CallSite, models: set[Origin]) -> bool:
    receiver = move.receiver
    if receiver is None:
        return False
    return bool(facts.project.values.origins(facts, receiver, move.ctx) & models)


def _module_off_first_device(
    facts: ScriptFacts, wraps: list[CallSite], models: set[Origin]
) -> Iterator[Hit]:
    """The model sent to a literal GPU that is not device_ids[0] (and never to it)."""
    firsts = _first_devices(facts, wraps, with_output=False)
    if len(firsts) != 1:
        return
    first = next(iter(firsts))
    wrong: list[tuple[CallSite, int]] = []
    for name in ("to", "cuda"):
        for move in facts.methods_called(name):
            device = move.argument(0, "device")
            if device is None or not _moves_model(facts, move, models):
                continue
            index = device_index(facts, device, move.ctx)
            if index == first:
                return  # moved where DataParallel wants it (too)
            if index is not None:
                wrong.append((move, index))
    for move, index in sorted(wrong, key=lambda pair: position(pair[0]))[:1]:
        yield hit(
            facts,
            move.node,
            f"{text_of(move.node)} puts the model on cuda:{index}, but DataParallel needs its "
            f"parameters on cuda:{first} (device_ids[0]): forward fails with 'module must have "
            f"its parameters and buffers on device cuda:{first}'",
            {"device": index, "first_device": first},
            cause="module placement",
        )


def _first_devices(
    facts: ScriptFacts, wraps: list[CallSite], *, with_output: bool = True
) -> set[int]:
    """The devices every DataParallel of the file gathers on; empty when they disagree or
    cannot be told."""
    found: set[int] = set()
    for wrap in wraps:
        ids = wrap.argument(1, "device_ids")
        accepted: set[int] = set()
        if ids is None or (isinstance(ids, ast.Constant) and ids.value is None):
            accepted.add(0)
        elif isinstance(ids, (ast.List, ast.Tuple)) and ids.elts:
            first = device_index(facts, ids.elts[0], wrap.ctx)
            if first is None:
                return set()
            accepted.add(first)
        else:
            return set()
        output = wrap.argument(2, "output_device") if with_output else None
        if output is not None:
            chosen = device_index(facts, output, wrap.ctx)
            if chosen is None:
                return set()
            accepted.add(chosen)
        if found and not found & accepted:
            return set()
        found |= accepted
    return found


def _models(facts: ScriptFacts, wraps: list[CallSite]) -> set[Origin]:
    """The wrappers and the models inside them: moving those is DDP109's business."""
    values = facts.project.values
    found = {Origin(CALL, w.node, facts) for w in wraps}
    for wrap in wraps:
        module = wrap.argument(0, "module")
        if module is not None:
            found |= values.origins(facts, module, wrap.ctx)
    return found


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
