"""The distributed region: the functions of the tree that run in the ranks of a job.

Seeds are the functions that init, wrap, shard or communicate, and the functions mp.spawn
starts. Their callers are in the region too (not across a spawn: the caller is the parent
process; not through a call made only without a launcher; not the parent's own paths, such as
a `--generate` branch beside mp.spawn), and so is whatever all those call.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.callgraph import CallGraph, Edge
from ddp_doctor.script.evidence import LAUNCHER_VARIABLES, is_launched, starts_lightning_ranks
from ddp_doctor.script.facts import SINGLE, CallSite, Context, Function

_DISTRIBUTED_MARKS = frozenset(
    {
        names.INIT_PROCESS_GROUP,
        names.DDP,
        names.DISTRIBUTED_SAMPLER,
        names.SET_DEVICE,
        "torch.distributed.get_rank",
        "torch.distributed.get_world_size",
        *names.SPAWN,
        *names.COLLECTIVES,
        # accelerate's Accelerator: under `accelerate launch` each GPU runs the program as
        # one process (it inits the process group and pins the device itself)
        names.ACCELERATOR,
        *names.ACCELERATE_STATES,
    }
)
_MARK_KEYS = frozenset(name.rsplit(".", 1)[-1] for name in _DISTRIBUTED_MARKS)
_RANK_MARKS = _DISTRIBUTED_MARKS - names.SPAWN  # what runs inside a rank
_LIGHTNING_KEYS = frozenset({"Trainer", "from_argparse_args"})


def distributed_region(graph: CallGraph) -> set[Function]:
    """Units that run in the ranks of a distributed job, for the whole tree (computed once):
    those that init, wrap, shard or communicate, and the functions mp.spawn starts; their
    callers (not across a spawn: the parent is one process); and whatever all those call."""
    cached = graph.__dict__.get("_distributed_region")
    if cached is not None:
        return cached
    seeds: set[Function] = set()
    parents: set[Function] = set()  # units that call mp.spawn: the parent process
    for facts in graph.files():
        for site in facts.calls:
            if site.key in _LIGHTNING_KEYS and starts_lightning_ranks(facts, site):
                seeds.add(graph.unit(facts, site.ctx))  # Lightning's DDP: the program per GPU
            if site.key not in _MARK_KEYS:
                continue
            qualified = facts.resolve(site)
            unit = graph.unit(facts, site.ctx)
            if qualified in _RANK_MARKS and site.ctx.launch != SINGLE and not single_process(site):
                seeds.add(unit)
            elif qualified in names.SPAWN:
                parents.add(unit)
                seeds |= {e.callee for e in graph.callees(unit) if e.site is site and e.spawned}

    seeds |= _started_by_a_launcher(graph)
    parents |= _parent_only(graph, parents, seeds)
    flags = launch_flags(graph)

    def passes_up(edge: Edge) -> bool:
        return _runs_in_the_ranks(edge, flags) and edge.caller not in parents

    def passes_down(edge: Edge) -> bool:
        return not without_launch(edge.site.ctx, flags)

    callers = graph.closure(seeds, up=True, follow=passes_up)
    region = graph.closure(callers, up=False, follow=passes_down)
    graph.__dict__["_distributed_region"] = region
    return region


def _started_by_a_launcher(graph: CallGraph) -> set[Function]:
    """Code that a launcher runs once per process with no call that marks it: a file a launch
    line of the tree starts (torchrun train.py), a function that reads LOCAL_RANK or RANK."""
    started: set[Function] = set()
    for facts in graph.files():
        if is_launched(facts):
            started.add(facts.module_unit)
        for access in facts.env:
            if not access.writes and access.name in LAUNCHER_VARIABLES:
                started.add(graph.unit(facts, access.ctx))
    return started


def _parent_only(graph: CallGraph, parents: set[Function], started: set[Function]) -> set[Function]:
    """Functions only the parent process calls (a `--generate` path beside mp.spawn)."""
    if not parents:
        return set()
    found: set[Function] = set()
    candidates = {e.callee for p in parents for e in graph.callees(p)} - started
    changed = True
    while changed:
        changed = False
        for unit in list(candidates - found):
            edges = graph.callers(unit)
            if edges and all(e.caller in parents or e.caller in found for e in edges):
                found.add(unit)
                candidates |= {e.callee for e in graph.callees(unit)} - started
                changed = True
    return found


def _runs_in_the_ranks(edge: Edge, flags: frozenset[str]) -> bool:
    """A call that passes the rank's code up to its caller: not mp.spawn (the caller is the
    parent), not one made only without a launcher (`if world_size == 1: run(0, 1)`)."""
    return not edge.spawned and not without_launch(edge.site.ctx, flags)


def launch_flags(graph: CallGraph) -> frozenset[str]:
    """Options of the program that start its process group: `if cfg.enable_fsdp: setup()`
    where setup() calls init_process_group (or the init itself under the option), and no
    init runs where the option is off. Their off arm runs without a launcher."""
    cached = graph.__dict__.get("_launch_flags")
    if cached is not None:
        return cached
    on: set[str] = set()
    off: set[str] = set()
    for facts in graph.files():
        for site in facts.calls_to(names.INIT_PROCESS_GROUP):
            unit = graph.unit(facts, site.ctx)
            for ctx in (site.ctx, *(edge.site.ctx for edge in graph.callers(unit))):
                for branch in ctx.branches:
                    name, holds = _flag(getattr(branch.node, "test", None))
                    if name is not None:
                        (on if branch.arm == holds else off).add(name)
    found = frozenset(on - off)
    graph.__dict__["_launch_flags"] = found
    return found


def without_launch(ctx: Context, flags: frozenset[str]) -> bool:
    """Code taken only without a launcher: a single-process branch, or the off arm of an
    option that starts the process group."""
    if ctx.launch == SINGLE:
        return True
    for branch in ctx.branches:
        name, holds = _flag(getattr(branch.node, "test", None))
        if name in flags and branch.arm != holds:
            return True
    return False


def _flag(test: ast.expr | None) -> tuple[str | None, bool]:
    """`if cfg.enable_fsdp:` -> ("enable_fsdp", True); `if not ddp:` -> ("ddp", False)."""
    holds = True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, holds = test.operand, False
    if isinstance(test, (ast.Name, ast.Attribute)):
        return names.last_identifier(test), holds
    return None, holds


def single_process(site: CallSite) -> bool:
    """init_process_group(world_size=1), DistributedSampler(num_replicas=1): one process."""
    count = site.keyword("world_size") or site.keyword("num_replicas")
    if count is None and site.key == "init_process_group":
        count = site.argument(3, "world_size")
    return isinstance(count, ast.Constant) and count.value == 1
