"""A device object made at module level and judged where it is used (DDP127).

`device = torch.device("cuda")` at the top of a training script makes an indexless device
object; it places nothing itself. Each `.to(device)` / `.cuda(device)` resolves "cuda" to
the current device at the moment it runs, and those uses are placements DDP127 judges on
their own (a name that only ever holds "cuda"). At module level the construction always runs
before the entry point's set_device, so judging it there reports every such script even
when each use runs after the pin (ECCV2022-RIFE's train.py: `device =
torch.device("cuda")` at the top, `set_device(args.local_rank)` in the __main__ block, then
`train()` moves the batches with `.to(device)`). The construction is left to its uses when
the file has at least one `.to(NAME)` or `.cuda(NAME)` of that name; a device object used
only through `device=` keywords is still judged where it is made.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.origins import CALL, Origin


def judged_at_uses(facts: ScriptFacts) -> set[int]:
    """ids of the torch.device calls that a module-level name holds and that are used by
    `.to(name)` / `.cuda(name)` in the same file."""
    used = _moved_to_names(facts)
    devices = {id(site.node) for site in facts.calls_to(names.TORCH_DEVICE)}
    return {
        id(assignment.value)
        for assignment in facts.assignments
        if assignment.ctx.module_level
        and assignment.target in used
        and id(assignment.value) in devices
    }


def _moved_to_names(facts: ScriptFacts) -> set[str]:
    found: set[str] = set()
    for site in facts.methods_called("to") + facts.methods_called("cuda"):
        device = site.argument(0, "device")
        text = names.dotted(device) if device is not None else None
        if text is not None:
            found.add(text)
    return found


def made_plain_cuda(origin: Origin) -> bool:
    """The origin is `torch.device("cuda")` itself: a name holding it is judged at its uses."""
    node, owner = origin.node, origin.facts
    if origin.kind != CALL or not isinstance(node, ast.Call) or owner is None:
        return False
    if owner.qualname(node.func) != names.TORCH_DEVICE or node.keywords or len(node.args) != 1:
        return False
    first = node.args[0]
    return isinstance(first, ast.Constant) and first.value == "cuda"
