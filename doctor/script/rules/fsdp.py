"""Rules about sharded data parallel (FSDP1's FullyShardedDataParallel, FSDP2's fully_shard):
what the optimizer holds, where the module is initialised, and whose weights every rank gets.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.facts import CallSite, ScriptFacts, position, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.placement import FRESH, device_state_before

FSDP1 = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    }
)
FSDP2 = frozenset(
    {
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard.fully_shard",
    }
)
_OPTIMIZER_MODULES = ("torch.optim.", "apex.optimizers.", "bitsandbytes.optim.", "timm.optim.")
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
_LOADS = ("load_state_dict", "from_pretrained", "load_checkpoint", "load_model")
_BROADCASTS = frozenset({"torch.distributed.broadcast", "torch.distributed.broadcast_object_list"})


def fsdp_wraps(facts: ScriptFacts) -> list[CallSite]:
    """Every FSDP1 wrap and FSDP2 fully_shard call of the file, in order."""
    return sorted(facts.calls_to(*FSDP1, *FSDP2), key=position)


@rule(
    "DDP129",
    Remediation(
        "Build the optimizer after the wrap, over the wrapped model's parameters: "
        "model = FSDP(model) (or fully_shard(model)), then optimizer = AdamW(model.parameters())."
    ),
)
def optimizer_before_fsdp_wrap(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        An optimizer (torch.optim, apex, bitsandbytes, timm) built over `m.parameters()` in a
        function that later wraps `m` (or one of its submodules) with FSDP1's
        FullyShardedDataParallel or FSDP2's fully_shard, with no optimizer built again after
        the wrap.
    Why it matters:
        FSDP1 flattens the parameters into FlatParameters and FSDP2 replaces them with
        sharded DTensors. An optimizer built before holds the old tensors: step() updates
        nothing that the model computes with, and the loss stays flat with no error
        (pytorch/pytorch issue #149205 for fully_shard; huggingface/accelerate issues #3209 and
        #3256; Lightning raises "The optimizer does not seem to reference any FSDP
        parameters", Lightning-Universe/lightning-GPT pull request #17).
    Example:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model = FSDP(model, device_id=local_rank)
    Fix:
        model = FSDP(model, device_id=local_rank)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    wraps = fsdp_wraps(facts)
    if not wraps:
        return
    optimizers = [c for c in facts.calls if _is_optimizer(facts, c)]
    for optimizer in optimizers:
        owner = _parameters_owner(optimizer.argument(0, "params"))
        if owner is None:
            continue
        wrap = _later_wrap_of(wraps, optimizer, owner)
        if wrap is None or _rebuilt_after(optimizers, wrap, owner):
            continue
        yield hit(
            facts,
            optimizer.node,
            f"the optimizer holds {owner}'s parameters from before {text_of(wrap.node.func)}"
            f"(...) at line {wrap.node.lineno} replaces them: step() updates nothing the model uses",
            {"model": owner, "wrap_line": wrap.node.lineno},
        )


def _is_optimizer(facts: ScriptFacts, call: CallSite) -> bool:
    qualified = facts.resolve(call) or ""
    last = qualified.rsplit(".", 1)[-1]
    return (
        qualified.startswith(_OPTIMIZER_MODULES)
        and "lr_scheduler" not in qualified
        and last[:1].isupper()
    )


def _parameters_owner(params: ast.expr | None) -> str | None:
    """`model` in `model.parameters()`, also inside a list or a generator over it."""
    if params is None:
        return None
    for node in ast.walk(params):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PARAMETER_METHODS
        ):
            return names.dotted(node.func.value)
    return None


def _later_wrap_of(wraps: list[CallSite], optimizer: CallSite, owner: str) -> CallSite | None:
    for wrap in wraps:
        if wrap.ctx.function is not optimizer.ctx.function or wrap.ctx.excludes(optimizer.ctx):
            continue
        if position(wrap) < position(optimizer):
            continue
        module = names.dotted(wrap.argument(0, "module"))  # type: ignore[arg-type]
        if module is not None and (module == owner or module.startswith(owner + ".")):
            return wrap
    return None


def _rebuilt_after(optimizers: list[CallSite], wrap: CallSite, owner: str) -> bool:
    return any(
        position(other) > position(wrap)
        and other.ctx.function is wrap.ctx.function
        and _parameters_owner(other.argument(0, "params")) == owner
        for other in optimizers
    )


@rule(
    "DDP130",
    Remediation(
        "Pass device_id=local_rank to FullyShardedDataParallel (or call "
        "torch.cuda.set_device(local_rank) first, or move the module to its GPU)."
    ),
)
def fsdp_module_on_cpu_without_device_id(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        FullyShardedDataParallel (FSDP1) given a module built on the CPU and not moved before
        the wrap, with no device_id, where no set_device (nor a helper or library that pins
        the device) ran on the way; or with sync_module_states=True and no device_id, which
        FSDP refuses for a CPU module.
    Why it matters:
        Without device_id FSDP takes the compute device from the module, and for a CPU module
        from the current device: cuda:0 on every rank until set_device runs. Every rank then
        flattens, shards and trains on GPU 0 (out of memory, or NCCL "Duplicate GPU
        detected"); the user is responsible for the move, and forgetting it is found only at
        the first forward (pytorch/pytorch issue #114299; the docstring reworded in
        pytorch/pytorch pull request #77850; huggingface/transformers pull request #20719
        passes device_id for this reason). With sync_module_states=True a CPU module fails
        at construction: "Module has CPU parameters, but sync_module_states=True is
        specified".
    Example:
        dist.init_process_group("nccl")
        model = FSDP(Net())
    Fix:
        model = FSDP(Net(), device_id=local_rank)
    """
    flow = flow_of(facts)
    for wrap in fsdp_wraps(facts):
        if facts.resolve(wrap) not in FSDP1 or wrap.keyword("device_id") is not None:
            continue
        module = wrap.argument(0, "module")
        if module is None or device_state_before(facts, module, wrap) != FRESH:
            continue
        syncs = _is_true(wrap.keyword("sync_module_states"))
        if not syncs and flow.pinned_before(wrap.ctx, wrap.node):
            continue
        reason = (
            "with sync_module_states=True FSDP refuses a CPU module"
            if syncs
            else "no set_device ran, so every rank initialises it on cuda:0"
        )
        yield hit(
            facts,
            wrap.node,
            f"{text_of(module)} is on the CPU and FSDP has no device_id: {reason}",
            {"model": text_of(module)},
        )


@rule(
    "DDP131",
    Remediation(
        "Pass sync_module_states=True to FullyShardedDataParallel (with device_id), or "
        "broadcast the weights: set_model_state_dict(model, state, options="
        "StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)), or load on every rank."
    ),
)
def rank0_weights_not_broadcast(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        Weights loaded only on rank 0 (load_state_dict, from_pretrained, load_checkpoint
        under a rank-0 guard) in a script that shards the model with FSDP1 or fully_shard,
        where no FSDP1 wrap passes sync_module_states=True and nothing broadcasts the
        weights (dist.broadcast, broadcast_object_list, broadcast_from_rank0=True).
    Why it matters:
        Loading the checkpoint on rank 0 only saves host memory, but only if FSDP then
        copies rank 0's weights to the others. Without sync_module_states (or a broadcast)
        each shard on the other ranks keeps its random or empty initialisation: training
        starts from a model that is part pretrained, part noise, with no error
        (meta-llama/llama-cookbook pull request #77 describes the rank-0 load that relies on
        sync_module_states; mosaicml/llm-foundry pull request #830: replicas started from
        different weights without it; pytorch/pytorch issue #105840).
    Example:
        if rank == 0:
            model.load_state_dict(torch.load("pretrained.pt"))
        model = FSDP(model, device_id=local_rank)
    Fix:
        model = FSDP(model, device_id=local_rank, sync_module_states=True)
    """
    wraps = fsdp_wraps(facts)
    if not wraps or any(_may_sync(w) for w in wraps) or _broadcasts(facts):
        return
    flow = flow_of(facts)
    for key in _LOADS:
        for load in facts.calls_by_key.get(key, ()):
            if not flow.runs_on_rank_zero_only(load.ctx):
                continue
            yield hit(
                facts,
                load.node,
                f"{text_of(load.node.func)}(...) runs on rank 0 only, and FSDP neither syncs "
                "module states nor broadcasts them: the other ranks keep their own weights",
            )
            return


def _may_sync(wrap: CallSite) -> bool:
    """sync_module_states given and not literally False."""
    value = wrap.keyword("sync_module_states")
    return value is not None and not (isinstance(value, ast.Constant) and not value.value)


def _broadcasts(facts: ScriptFacts) -> bool:
    if facts.calls_to(*_BROADCASTS):
        return True
    return any(
        kw.arg == "broadcast_from_rank0" for site in facts.calls for kw in site.node.keywords
    )


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True
