"""DDP118 (load-without-map-location): where a program's processes run on GPUs, and the
calls of a project's loading helper that hand no map_location on to torch.load."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.registry import Hit
from ddp_doctor.script import names
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, Context, Function, ScriptFacts, position, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.nodevice import without_own_gpu
from ddp_doctor.script.purpose import forwarding_loaders, passes_keywords_on
from ddp_doctor.script.rankflow import contains


def program_uses_cuda(facts: ScriptFacts) -> bool:
    """CUDA in this file or in another file of its programs, or an accelerate Accelerator
    there (not `cpu=True`): a helper module's torch.load (`get_model()` of
    utils/model_utils.py) runs on the GPU its entry point's launcher gives each process."""
    return (
        flow_of(facts).uses_cuda
        or any(
            mate is not facts and (flow_of(mate).uses_cuda or _places_on_gpus(mate))
            for mate in program_files(facts)
        )
        or _places_on_gpus(facts)
    )


def _places_on_gpus(facts: ScriptFacts) -> bool:
    """An accelerate Accelerator not told to stay on the CPU: each process gets its GPU."""
    for site in facts.calls_to(names.ACCELERATOR):
        cpu = site.keyword("cpu")
        if not (isinstance(cpu, ast.Constant) and cpu.value is True):
            return True
    return False


def maps_location(load: CallSite) -> bool:
    where = load.argument(1, "map_location")
    return where is not None and not (isinstance(where, ast.Constant) and where.value is None)


def helper_loads_without_map_location(facts: ScriptFacts) -> Iterator[Hit]:
    """Calls of a helper that hands its keywords on to torch.load, with no map_location."""
    loaders = forwarding_loaders(facts)
    if not loaders:
        return
    flow = flow_of(facts)
    helper_names = {loader.name for loader in loaders}
    for site in (s for key in helper_names for s in facts.calls_by_key.get(key, ())):
        helper = next((f for f in flow.graph.targets(facts, site) if f in loaders), None)
        if helper is None or site.keyword("map_location") is not None:
            continue
        if passes_keywords_on(site) or flow.runs_on_rank_zero_only(site.ctx):
            continue
        if without_own_gpu(site.ctx):
            continue
        if not flow.in_distributed_region(site.ctx):
            continue
        yield hit(
            facts,
            site.node,
            f"{text_of(site.node.func)}() hands no map_location to its torch.load: every rank "
            "loads onto the GPU the file was saved from (cuda:0)",
        )


# Calls that put a state dict into a model or optimizer: the module's and optimizer's own
# method, peft's adapter restore (alpaca-lora's and StarCoder's `set_peft_model_state_dict(model,
# adapters_weights)` after a torch.load), torch.distributed.checkpoint.state_dict's setters.
_RESTORE_KEYS = (
    "load_state_dict",
    "set_peft_model_state_dict",
    "set_model_state_dict",
    "set_optimizer_state_dict",
    "set_state_dict",
)


def restores_state(facts: ScriptFacts, load: CallSite) -> bool:
    """The loaded object is restored into a model or optimizer: `x.load_state_dict(
    torch.load(path))`, or its name (`ckpt = torch.load(path)`) is read by a later
    restoring call of the same function (`model.load_state_dict(ckpt["model"])`,
    `set_peft_model_state_dict(model, adapters_weights)`)."""
    restores = [
        site
        for key in _RESTORE_KEYS
        for site in facts.calls_by_key.get(key, ())
        if site.ctx.function is load.ctx.function
    ]
    if any(contains(site.node, load.node) for site in restores):
        return True
    held = {
        assignment.target.split(".")[0].split("[")[0]
        for assignment in facts.assignments
        if assignment.ctx.function is load.ctx.function and contains(assignment.value, load.node)
    }
    return any(
        isinstance(node, ast.Name) and node.id in held
        for site in restores
        if position(site) > position(load)
        for argument in [*site.node.args, *(k.value for k in site.node.keywords)]
        for node in ast.walk(argument)
    )


# Hooks a Trainer calls in every process it runs: Lightning's, and transformers' TrainerCallback
# (its CallbackHandler calls on_evaluate, on_log... in each process; the library's own
# ProgressCallback opens its bars under `if state.is_world_process_zero:`).
_TRAINER_HOOK_BASES = ("lightning.", "pytorch_lightning.", "lightning_fabric.", "transformers.")


def runs_as_trainer_hook(facts: ScriptFacts, ctx: Context) -> bool:
    """A method of a class derived from Lightning's (a CheckpointIO plugin, a Callback, a
    LightningModule) or from transformers' (a TrainerCallback) that rank code instantiates or
    registers (`trainer.add_callback(MMLUEvalCallback)`): the Trainer calls its hooks in every
    process it starts (`load_checkpoint` when resuming, `on_evaluate`), though no call of the
    tree names them (donut's and nougat's CustomCheckpointIO, qlora's MMLUEvalCallback)."""
    return runs_as_framework_hook(facts, ctx, _TRAINER_HOOK_BASES)


# Plugin methods Lightning calls on global rank 0 only: Strategy.save_checkpoint and
# remove_checkpoint call them under `if self.is_global_zero:` (Lightning-AI/pytorch-lightning,
# src/lightning/pytorch/strategies/strategy.py); load_checkpoint runs on every rank.
_RANK_ZERO_PLUGIN_METHODS = {"CheckpointIO": ("save_checkpoint", "remove_checkpoint")}


def runs_as_framework_hook(facts: ScriptFacts, ctx: Context, bases: tuple[str, ...]) -> bool:
    function = ctx.function
    if function is None or function.class_name is None:
        return False
    node = _class_node(facts, function.class_name, function)
    qualnames = [facts.qualname(base) or "" for base in node.bases] if node else []
    if node is None or not any(q.startswith(bases) for q in qualnames):
        return False
    if any(
        q.endswith(plugin) and function.name in methods
        for q in qualnames
        for plugin, methods in _RANK_ZERO_PLUGIN_METHODS.items()
    ):
        return False
    flow = flow_of(facts)
    return any(flow.in_distributed_region(site.ctx) for site in _naming_calls(facts, node.name))


def _class_node(facts: ScriptFacts, name: str, method: Function) -> ast.ClassDef | None:
    """The module-level class, or one defined inside a function (qlora's MMLUEvalCallback,
    built in train() around the trainer it closes over)."""
    known = facts.classes.get(name)
    if known is not None:
        return known.node
    nested = facts.__dict__.get("_nested_classes")
    if nested is None:
        tree = facts.tree if facts.is_python else None
        nested = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] if tree else []
        facts.__dict__["_nested_classes"] = nested
    return next((n for n in nested if n.name == name and method.node in n.body), None)


def _naming_calls(facts: ScriptFacts, name: str) -> Iterator[CallSite]:
    """Calls of the class, and calls handed the class itself (`add_callback(Cls)`, a
    `callbacks=[Cls]` list of a Trainer or pl.Trainer)."""
    yield from facts.calls_by_key.get(name, ())
    for site in facts.calls_by_key.get("add_callback", ()):
        if any(isinstance(arg, ast.Name) and arg.id == name for arg in site.node.args):
            yield site
    yield from _callback_lists(facts).get(name, ())


def _callback_lists(facts: ScriptFacts) -> dict[str, list[CallSite]]:
    """Class name -> the calls whose `callbacks=` names it, in the list itself
    (`Trainer(..., callbacks=[SavePeftModelCallback])`: transformers' CallbackHandler makes an
    instance of a class it is given) or in a list a name of the same function holds
    (`callbacks = [Cls]; Trainer(callbacks=callbacks)`). Built once per file."""
    known = facts.__dict__.get("_callback_lists")
    if known is not None:
        return known
    found: dict[str, list[CallSite]] = {}
    for site in facts.calls:
        given = site.keyword("callbacks")
        if given is None:
            continue
        values = [given]
        if isinstance(given, ast.Name):
            values += [
                a.value
                for a in facts.assignments
                if a.target == given.id and a.ctx.function is site.ctx.function
            ]
        for node in (n for value in values for n in ast.walk(value)):
            if isinstance(node, ast.Name) and node.id != getattr(given, "id", None):
                found.setdefault(node.id, []).append(site)
    facts.__dict__["_callback_lists"] = found
    return found
