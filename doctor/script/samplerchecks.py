"""Tests of a DistributedSampler's use that the data rules ask beside its flow (samplers.py):
whether the program cuts its gathered results back to the dataset's length, and whether every
call path into a helper's sampler passes shuffle=False."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from ddp_doctor.script import names
from ddp_doctor.script.bindings import reaching_bindings
from ddp_doctor.script.facts import CallSite, ScriptFacts

if TYPE_CHECKING:
    from ddp_doctor.script.samplers import SamplerUse


def truncates_to_dataset(facts: ScriptFacts, use: SamplerUse) -> bool:
    """The file cuts gathered results back to the dataset's length, the documented fix for the
    padding: `merged[: len(val_set)]` (the sampler's dataset), `[: len(loader.dataset)]`, or
    a `nested_truncate(preds, len(dataset))` call."""
    dataset = use.site.argument(0, "dataset")
    wanted = names.dotted(dataset) if dataset is not None else None
    if facts.calls_by_key.get("nested_truncate"):
        return True
    for node in ast.walk(facts.tree) if facts.tree is not None else ():
        if not (isinstance(node, ast.Slice) and node.lower is None and node.step is None):
            continue
        upper = node.upper
        if not (isinstance(upper, ast.Call) and names.last_identifier(upper.func) == "len"):
            continue
        measured = names.dotted(upper.args[0]) if upper.args else None
        if measured is not None and (measured == wanted or measured.endswith(".dataset")):
            return True
    return False


def never_shuffled(facts: ScriptFacts, sampler: CallSite) -> bool:
    """`DistributedSampler(ds, shuffle=shuffle)` in a helper whose every call path that
    reaches its arm passes shuffle=False (dinov2's `_make_sampler`: only the evaluation
    loaders choose SamplerType.DISTRIBUTED, all with shuffle=False)."""
    shuffle = sampler.argument(3, "shuffle")
    function = sampler.ctx.function
    if not isinstance(shuffle, ast.Name) or function is None or shuffle.id not in function.params:
        return False
    paths = reaching_bindings(facts.project.graph, sampler, (shuffle.id,))
    return bool(paths) and all(_is_false(path[shuffle.id]) for path in paths)


def _is_false(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and value.value is False
