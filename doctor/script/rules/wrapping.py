"""Rules about wrapping the model: DataParallel, device_ids, placement before the wrap."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation, Severity
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.dpsubclasses import data_parallel_subclass_calls
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, ScriptFacts, position, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.globalrank import holds_global_rank
from ddp_doctor.script.hits import hit
from ddp_doctor.script.origins import CALL, Origin
from ddp_doctor.script.placement import (
    FRESH,
    assembled_from_placed,
    device_state_before,
    is_device_move,
    is_hard_coded_index,
)


@rule(
    "DDP101",
    Remediation(
        "Use DistributedDataParallel with one process per GPU, started by torchrun.",
        ("torchrun --nproc-per-node=NUM_GPUS train.py",),
    ),
)
def data_parallel_used(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        Calls of torch.nn.DataParallel (under any import alias), and of the project's own
        subclass of it: a class of the checked tree with a DataParallel base, or, from the
        project's own module out of view, a class whose name ends in DataParallel without
        saying Distributed or Shard (ABINet's `MyDataParallel` from its utils.py). Library
        subclasses (mmcv's MMDataParallel) are left alone.
    Why it matters:
        DataParallel runs one Python process that scatters each batch, replicates the model
        every step and gathers outputs and the loss on device_ids[0]. GPU 0 runs out of memory
        first, the GIL caps throughput, and PyTorch recommends DDP even on one machine.
        Where the same script also has a DDP path, this is reported as info.
    Example:
        model = nn.DataParallel(model, device_ids=[0, 1, 2, 3])
    Fix:
        Wrap with DistributedDataParallel(model, device_ids=[local_rank]) in a script started
        by `torchrun --nproc-per-node=N`, one process per GPU.
    """
    also_ddp = bool(flow_of(facts).ddp_wraps)
    for site in facts.calls_to(names.DATA_PARALLEL) + data_parallel_subclass_calls(facts):
        target = flow_of(facts).target_of(site.node) or "the model"
        yield hit(
            facts,
            site.node,
            f"{target} is wrapped in nn.DataParallel: one process for all GPUs, GPU 0 gathers "
            "outputs and loss",
            {"variable": target},
            severity=Severity.INFO if also_ddp else None,
        )


@rule(
    "DDP108",
    Remediation("Pass device_ids=[local_rank] and output_device=local_rank (or leave it out)."),
)
def ddp_device_ids_wrong(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        DistributedDataParallel with device_ids holding a literal index ([0]), more than one
        id (a list of several, or list(range(...)), directly or through a name), or the
        global rank (dist.get_rank() of no group, unless every init of the file passes rank= the
    LOCAL_RANK variable, as MeloTTS does; the RANK variable, a name holding one of them, or a
        function of the tree that returns one of them after constant fallbacks: DETR's
        `get_rank()`, `return 0` before the group exists); DDP whose output_device is not device_ids[0] (a conditional id, `[device
        if device else local_rank]`, agrees when one of its arms is the output device). DataParallel's device_ids
        and output_device are its own business (several GPUs, any output device, are legal).
    Why it matters:
        Each DDP process drives exactly one GPU, its local rank. device_ids=[0] puts every
        rank's replica on GPU 0 ("Duplicate GPU detected" or a silent pile-up); several ids are
        rejected; the global rank is past the last GPU on the second node; a different
        output_device moves outputs where the loss does not expect them.
    Example:
        model = DDP(model, device_ids=[0], output_device=0)
    Fix:
        model = DDP(model, device_ids=[local_rank], output_device=local_rank), with local_rank
        from os.environ["LOCAL_RANK"].
    """
    flow = flow_of(facts)
    pinned = flow.pins_device_by_environment
    for site in flow.ddp_wraps:
        yield from _ddp_ids(facts, site, pinned)


def _ddp_ids(facts: ScriptFacts, site: CallSite, pinned: bool) -> Iterator[Hit]:
    ids = site.argument(1, "device_ids")
    literal = isinstance(ids, (ast.List, ast.Tuple))
    several = len(ids.elts) > 1 if literal else ids is not None and _several_ids(facts, ids, site)
    if several:
        yield hit(
            facts,
            ids,
            f"device_ids={text_of(ids)} gives one DDP process several GPUs",
            {"device_ids": text_of(ids)},
        )
        return
    if literal:
        if ids.elts and is_hard_coded_index(ids.elts[0]) and not pinned:
            yield hit(
                facts,
                ids,
                f"device_ids={text_of(ids)} is hard-coded: every rank uses that GPU",
                {"device_ids": text_of(ids)},
            )
            return
        if ids.elts and holds_global_rank(facts, ids.elts[0]):
            yield hit(
                facts,
                ids,
                f"device_ids={text_of(ids)} uses the global rank, past the last GPU on the second "
                "node; use the local rank",
                {"device_ids": text_of(ids)},
                severity=Severity.WARNING,
            )
            return
    yield from _output_device_mismatch(facts, site)


def _output_device_mismatch(facts: ScriptFacts, site: CallSite) -> Iterator[Hit]:
    ids = site.argument(1, "device_ids")
    output = site.argument(2, "output_device")
    if output is None or not isinstance(ids, (ast.List, ast.Tuple)) or not ids.elts:
        return
    first = ids.elts[0]
    if isinstance(output, ast.Constant) and output.value is None:
        return
    arms = (first.body, first.orelse) if isinstance(first, ast.IfExp) else (first,)
    if all(ast.dump(arm) != ast.dump(output) for arm in arms):
        yield hit(
            facts,
            output,
            f"output_device={text_of(output)} differs from device_ids[0]={text_of(first)}",
            {"device_ids": text_of(ids), "output_device": text_of(output)},
        )


def _several_ids(facts: ScriptFacts, ids: ast.expr, site: CallSite) -> bool:
    """A list of several ids, or a range of them, held by a name (a literal list is judged
    by the caller)."""
    made = [o.node for o in facts.project.values.origins(facts, ids, site.ctx)]
    return bool(made) and all(_is_several(node) for node in made)


def _is_several(node: ast.AST | None) -> bool:
    if isinstance(node, (ast.List, ast.Tuple)):
        return len(node.elts) > 1 and not any(isinstance(e, ast.Starred) for e in node.elts)
    if isinstance(node, ast.Call) and names.last_identifier(node.func) == "list" and node.args:
        node = node.args[0]
    return isinstance(node, ast.Call) and names.last_identifier(node.func) == "range"


@rule(
    "DDP109",
    Remediation(
        "Move the model first (model.to(device)), then wrap it in DDP; for DataParallel, move "
        "it (or the wrapper) to device_ids[0] before the first forward."
    ),
)
def model_not_on_device(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        DistributedDataParallel(model) in a CUDA script where `model` was built in the same
        function and not moved with .to(device) or .cuda() before the wrap (also when it is
        moved only afterwards; a method of the same object called first that moves it,
        RIFE's `self.device()` running `self.flownet.to(device)`, counts as a move). nn.DataParallel(model) where `model` was built on the CPU and
        neither it nor the wrapper is ever moved (`nn.DataParallel(model).cuda()` is right). A
        model whose own layers are placed on devices (model parallel) is left alone, and so is
        a program that builds its modules with a CUDA default (torch.set_default_device,
        torch.set_default_tensor_type(torch.cuda.BFloat16Tensor)), and a module built around
        a container whose members were each placed first (`heads[k] = head.cuda()`, then
        `DDP(AllHeads(heads))`) or around modules each placed first (`G = Gen().cuda()`,
        `D = Disc().cuda()`, then `nn.DataParallel(G_D(G, D))`).
    Why it matters:
        DDP registers the parameters and their gradient hooks at construction. A CPU module
        with device_ids fails ("module parameters ... on device cpu"); without device_ids the
        NCCL backend fails on CPU tensors, and moving the wrapped model later leaves DDP's
        buckets pointing at the old tensors. DataParallel checks at every forward: "module
        must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one
        of them on device: cpu".
    Example:
        model = Net()
        model = DDP(model, device_ids=[local_rank])
    Fix:
        model = Net().to(local_rank)
        model = DDP(model, device_ids=[local_rank])
        (DataParallel: model = nn.DataParallel(Net()).to("cuda:0"))
    """
    flow = flow_of(facts)
    if facts.calls_to("torch.set_default_device") or _builds_on_cuda_by_default(facts):
        return
    for site in flow.ddp_wraps if flow.uses_cuda else []:
        module = site.argument(0, "module")
        if module is None or device_state_before(facts, module, site) != FRESH:
            continue
        if not assembled_from_placed(facts, module, site):
            yield hit(
                facts,
                site.node,
                f"{text_of(module)} is wrapped in DDP before it is moved to its GPU",
                {"model": text_of(module)},
            )
    for site in facts.calls_to(names.DATA_PARALLEL):
        module = site.argument(0, "module")
        if module is None or device_state_before(facts, module, site) != FRESH:
            continue
        if not _moved_anywhere(facts, site, module) and not assembled_from_placed(
            facts, module, site
        ):
            yield hit(
                facts,
                site.node,
                f"{text_of(module)} is run by nn.DataParallel while still on the CPU: forward "
                "fails with 'module must have its parameters and buffers on device cuda:0'",
                {"model": text_of(module)},
            )


def _builds_on_cuda_by_default(facts: ScriptFacts) -> bool:
    """torch.set_default_tensor_type(torch.cuda.*Tensor) somewhere in the program: the
    modules built under it are on the GPU already."""
    return any(
        "cuda" in text_of(arg)
        for mate in program_files(facts)
        for site in mate.calls_to("torch.set_default_tensor_type")
        for arg in site.node.args[:1]
    )


def _moved_anywhere(facts: ScriptFacts, wrap: CallSite, module: ast.expr) -> bool:
    """Whether the wrapper or the model inside it is moved to a device anywhere in the file."""
    values = facts.project.values
    held = {Origin(CALL, wrap.node, facts)} | values.origins(facts, module, wrap.ctx)
    for name in ("to", "cuda", "to_empty"):
        for move in facts.methods_called(name):
            receiver = move.receiver
            if receiver is None or not is_device_move(move.node):
                continue
            if receiver is wrap.node or values.origins(facts, receiver, move.ctx) & held:
                return True
    return False


@rule(
    "DDP115",
    Remediation(
        "Convert first: model = nn.SyncBatchNorm.convert_sync_batchnorm(model), "
        "then model.to(device), then DDP(model)."
    ),
)
def syncbn_after_ddp(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        nn.SyncBatchNorm.convert_sync_batchnorm(x) where x is already the DDP-wrapped model,
        or the module that was passed to DDP earlier. Any converter of that shape counts:
        a library's own SyncBatchNorm class with a convert_sync_batchnorm classmethod
        (MinkowskiEngine's MinkowskiSyncBatchNorm, timm's SyncBatchNormAct), a
        convert_sync_batchnorm function (mmcv, mmengine) and apex's convert_syncbn_model.
    Why it matters:
        DDP has already registered the old BatchNorm parameters. The new SyncBatchNorm layers'
        gradients are not in DDP's buckets: they are not averaged across ranks, silently, or
        DDP fails on parameters it does not know.
    Example:
        model = DDP(model, device_ids=[local_rank])
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    Fix:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(local_rank)
        model = DDP(model, device_ids=[local_rank])
    """
    flow = flow_of(facts)
    for site in _sync_batchnorm_converts(facts):
        module = site.argument(0, "module")
        text = names.dotted(module) if module is not None else None
        if text is None:
            continue
        wrapped_before = flow.holds_wrapped_model(module, site.ctx, site.node)  # type: ignore[arg-type]
        passed_before = any(
            wrap.ctx.function is site.ctx.function
            and position(wrap) < position(site)
            and names.dotted(wrap.argument(0, "module") or ast.Constant(None)) == text
            for wrap in flow.ddp_wraps
        )
        if wrapped_before or passed_before:
            yield hit(
                facts,
                site.node,
                f"convert_sync_batchnorm({text}) runs after {text} was wrapped in DDP",
                {"model": text},
            )


_CONVERTER_NAMES = ("convert_sync_batchnorm", "convert_syncbn_model")


def _sync_batchnorm_converts(facts: ScriptFacts) -> list[CallSite]:
    """Calls of a SyncBatchNorm converter, by the converter's name whatever its library.

    torch's classmethod, a library's own `XSyncBatchNorm.convert_sync_batchnorm`, mmcv's and
    mmengine's `convert_sync_batchnorm(module)` function and apex's `convert_syncbn_model`
    all return the module with its BatchNorm layers replaced.
    """
    found = [site for name in _CONVERTER_NAMES for site in facts.calls_by_key.get(name, ())]
    return sorted(found, key=position)
