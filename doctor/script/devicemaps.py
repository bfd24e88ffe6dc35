"""A transformers/accelerate `device_map` that puts the whole model on one GPU index.

`device_map={"": int(os.environ.get("LOCAL_RANK") or 0)}` (alpaca-lora's and its many
derivatives' `finetune.py`, started by torchrun) places every weight on the process's own GPU:
an integer in a device map means a CUDA device index in transformers' `from_pretrained`. Such
a program is a CUDA script although it names no `.cuda()`. "auto", "cpu", "disk", "meta" and
"mps" place nothing by index.
"""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import ScriptFacts


def places_by_device_map(facts: ScriptFacts) -> bool:
    """A `device_map=` keyword whose dict (written there or assigned to the name it passes)
    maps a module to a GPU: an index, "cuda...", or a computed value (the rank's index)."""
    for site in facts.calls:
        value = site.keyword("device_map")
        if value is None:
            continue
        if isinstance(value, ast.Dict) and _maps_to_gpu(value):
            return True
        if isinstance(value, ast.Name) and any(
            isinstance(a.value, ast.Dict) and _maps_to_gpu(a.value)
            for a in facts.assignments_by_target.get(value.id, ())
        ):
            return True
    return False


def _maps_to_gpu(mapping: ast.Dict) -> bool:
    return any(_is_gpu(value) for value in mapping.values)


def _is_gpu(value: ast.expr) -> bool:
    if isinstance(value, ast.Constant):
        if isinstance(value.value, bool):
            return False
        if isinstance(value.value, int):
            return True
        return isinstance(value.value, str) and value.value.startswith("cuda")
    if isinstance(value, ast.JoinedStr):  # f"cuda:{local_rank}"
        first = value.values[0] if value.values else None
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda")
    return not isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set))
