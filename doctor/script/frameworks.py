"""Frameworks that start the ranks themselves: Lightning's Trainer and Fabric.

A Trainer or Fabric given a strategy, devices or nodes is evidence that the program runs
distributed; a Trainer set to a DDP strategy, and a Fabric whose `launch` runs the program,
start one process per device and run the program's code in each.
"""

from __future__ import annotations

import ast
import re

from ddp_doctor.script.facts import CallSite, ScriptFacts

_TRAINERS = ("lightning", "pytorch_lightning")
_TRAINER_KEYWORDS = frozenset({"strategy", "devices", "gpus", "num_nodes"})


def configured_trainer(facts: ScriptFacts, site: CallSite, qualified: str) -> bool:
    """A Lightning Trainer or Fabric given a strategy, devices or nodes."""
    if not qualified.startswith(_TRAINERS) or site.key not in ("Trainer", "Fabric"):
        return False
    return _several_processes(facts, site)


def _several_processes(facts: ScriptFacts, site: CallSite) -> bool:
    """Given a strategy, devices or nodes, unless devices and nodes are both one (`devices = 1`,
    a module constant, as lit-llama's adapter.py: one process, whatever the strategy)."""
    given = {kw.arg: kw.value for kw in site.node.keywords if kw.arg in _TRAINER_KEYWORDS}
    if not given:
        return False
    devices = given.get("devices", given.get("gpus"))
    if devices is None or not _is_one(facts, devices, site):
        return True
    nodes = given.get("num_nodes")
    return nodes is not None and not _is_one(facts, nodes, site)


def _is_one(facts: ScriptFacts, value: ast.expr, site: CallSite) -> bool:
    """The value is the constant 1 (or "1") wherever it comes from."""
    origins = facts.project.values.origins(facts, value, site.ctx)
    return bool(origins) and all(
        isinstance(o.node, ast.Constant) and o.node.value in (1, "1") and o.node.value is not True
        for o in origins
    )


_FABRICS = frozenset({"lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric"})


def launches_fabric_ranks(facts: ScriptFacts, site: CallSite) -> bool:
    """`fabric.launch(main, ...)` or `fabric.launch()` on a Fabric given a strategy, devices
    or nodes: Fabric starts one process per device, each running the program again up to the
    launch and then the function it is given (Lightning's subprocess script launcher)."""
    if site.key != "launch" or site.receiver is None:
        return False
    values = facts.project.values
    for origin in values.origins(facts, site.receiver, site.ctx):
        call = origin.node
        if origin.qualname in _FABRICS and isinstance(call, ast.Call):
            owner = origin.facts or facts
            made = owner.site_of.get(id(call))
            if made is None:
                return any(kw.arg in _TRAINER_KEYWORDS for kw in call.keywords)
            return _several_processes(owner, made)
    return False


def starts_lightning_ranks(facts: ScriptFacts, site: CallSite) -> bool:
    """A Lightning Trainer (or Trainer.from_argparse_args) set to a DDP strategy: it starts
    one process per GPU and runs the program again in each (`strategy="ddp"`, or the
    program's trainer settings given "ddp": `trainer_config["accelerator"] = "ddp"`)."""
    qualified = facts.resolve(site) or ""
    if not qualified.startswith(_TRAINERS) or site.key not in _TRAINER_CALLS:
        return False
    if any(
        kw.arg in ("strategy", "accelerator") and _is_ddp(kw.value) for kw in site.node.keywords
    ):
        return True
    return any(
        _is_ddp(assignment.value) and _names_a_strategy(assignment.target)
        for assignment in facts.assignments
    )


_TRAINER_CALLS = frozenset({"Trainer", "from_argparse_args"})
_STRATEGY_FIELD = re.compile(r"""(?:\.|\[['"])(?:strategy|accelerator)(?:['"]\])?$""")


def _is_ddp(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and str(value.value).startswith("ddp")


def _names_a_strategy(target: str) -> bool:
    return bool(_STRATEGY_FIELD.search(target))
