"""The distributed region: the functions of the tree that run in the ranks of a job.

Seeds are the functions that init, wrap, shard or communicate, and the functions mp.spawn
starts. Their callers are in the region too (not across a spawn: the caller is the parent
process; not through a call made only without a launcher; not the parent's own paths, such as
a `--generate` branch beside mp.spawn), and so is whatever all those call. A rank query in a
helper written for any program (`not dist.is_initialized() or dist.get_rank() == 0`) marks its
callers only in programs whose entry point runs distributed code.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ddp_doctor.script import names
from ddp_doctor.script.callgraph import CallGraph, Edge
from ddp_doctor.script.evidence import (
    LAUNCHER_VARIABLES,
    imported_closure,
    is_entry_point,
    is_launched,
)
from ddp_doctor.script.facts import (
    DISTRIBUTED,
    SINGLE,
    Branch,
    CallSite,
    Context,
    Function,
    ScriptFacts,
)
from ddp_doctor.script.frameworks import launches_fabric_ranks, starts_lightning_ranks
from ddp_doctor.script.launchtests import launch_of_arm
from ddp_doctor.script.optionflags import flag_of

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
        # Horovod: horovodrun starts one process per GPU, each calling hvd.init()
        "horovod.torch.init",
    }
)
# accelerate's notebook_launcher forks the workers from the notebook's kernel: the cells' own
# code runs once, in the kernel (the parent), the function handed to it in every worker.
_NOTEBOOK_LAUNCHERS = frozenset(
    {"accelerate.notebook_launcher", "accelerate.launchers.notebook_launcher"}
)
_MARK_KEYS = frozenset(name.rsplit(".", 1)[-1] for name in _DISTRIBUTED_MARKS | _NOTEBOOK_LAUNCHERS)
_RANK_MARKS = _DISTRIBUTED_MARKS - names.SPAWN  # what runs inside a rank
_LIGHTNING_KEYS = frozenset({"Trainer", "from_argparse_args"})
_RANK_QUERIES = frozenset({"torch.distributed.get_rank", "torch.distributed.get_world_size"})
_GROUP_STATE_CHECKS = frozenset({"is_initialized", "is_available"})


def asks_group_state(facts: ScriptFacts, unit: Function) -> bool:
    """The function asks whether a process group exists (`if not dist.is_initialized():
    return 0`, `not is_initialized() or get_rank() == 0`): a rank helper written for any
    program, distributed or not, so its rank query marks no code as running in the ranks."""
    if unit is facts.module_unit:
        return False
    asserted = {  # `assert dist.is_initialized()` requires a group: no helper for any program
        id(node)
        for statement, ctx in facts.asserts
        if ctx.function is unit
        for node in ast.walk(statement.test)
    }
    return any(
        site.ctx.function is unit
        and id(site.node) not in asserted
        and facts.resolve(site) == f"torch.distributed.{site.key}"
        for key in _GROUP_STATE_CHECKS
        for site in facts.calls_by_key.get(key, ())
    )


def distributed_region(graph: CallGraph) -> set[Function]:
    """Units that run in the ranks of a distributed job, for the whole tree (computed once):
    those that init, wrap, shard or communicate, and the functions mp.spawn starts; their
    callers (not across a spawn: the parent is one process); and whatever all those call."""
    cached = graph.__dict__.get("_distributed_region")
    if cached is not None:
        return cached
    seeds: set[Function] = set()
    parents: set[Function] = set()  # units that call mp.spawn: the parent process
    conditional: dict[Function, set[str]] = {}  # seeds whose marks hang on a parameter
    always: set[Function] = set()
    helpers: dict[Function, ScriptFacts] = {}  # rank helpers for any program (see below)
    for facts in graph.files():
        for site in facts.calls:
            if site.key in _LIGHTNING_KEYS and starts_lightning_ranks(facts, site):
                always.add(graph.unit(facts, site.ctx))  # Lightning's DDP: the program per GPU
            if site.key == "launch" and launches_fabric_ranks(facts, site):
                always.add(graph.unit(facts, site.ctx))  # Fabric: the program per device
            if site.key not in _MARK_KEYS:
                continue
            qualified = facts.resolve(site)
            unit = graph.unit(facts, site.ctx)
            if qualified in _RANK_QUERIES and asks_group_state(facts, unit):
                helpers[unit] = facts  # get_rank() behind is_initialized(): for any program
                continue
            if qualified in _RANK_MARKS and site.ctx.launch != SINGLE and not single_process(site):
                wanted = _launch_parameters(unit, site)
                (conditional.setdefault(unit, set()).update(wanted) if wanted else always.add(unit))
            elif qualified in names.SPAWN or qualified in _NOTEBOOK_LAUNCHERS:
                parents.add(unit)
                always |= {e.callee for e in graph.callees(unit) if e.site is site and e.handed}

    always |= _started_by_a_launcher(graph)
    seeds = always | set(conditional)
    conditional = {unit: wanted for unit, wanted in conditional.items() if unit not in always}
    parents |= _parent_only(graph, parents, seeds)
    flags = launch_flags(graph)

    def passes_up(edge: Edge) -> bool:
        if not _runs_in_the_ranks(edge, flags) or edge.caller in parents:
            return False
        wanted = conditional.get(edge.callee)
        return not wanted or not all(_passes_no_launch(edge, name) for name in wanted)

    def passes_down(edge: Edge) -> bool:
        return not without_launch(edge.site.ctx, flags)

    callers = graph.closure(seeds, up=True, follow=passes_up)
    region = graph.closure(callers, up=False, follow=passes_down)
    ranked = _helpers_of_distributed_programs(graph, helpers, region)
    if ranked:
        first, in_program = callers, _programs_in(region)

        def passes_up_in_its_program(edge: Edge) -> bool:
            return passes_up(edge) and (edge.caller in first or in_program(edge.facts))

        callers = graph.closure(seeds | ranked, up=True, follow=passes_up_in_its_program)
        region = graph.closure(callers, up=False, follow=passes_down)
    graph.__dict__["_distributed_region"] = region
    return region


def _helpers_of_distributed_programs(
    graph: CallGraph, helpers: dict[Function, ScriptFacts], region: set[Function]
) -> set[Function]:
    """The callers of rank helpers (`is_master()`: not is_initialized() or get_rank() == 0)
    in a program whose entry point runs distributed code: there the call marks its caller as
    running in the ranks. A one-process evaluation script that imports is_master() from the
    project's dist module and never starts a group is not marked; a caller that no entry
    point of the tree imports (a library's) is, as before."""
    found: set[Function] = set()
    for helper in helpers:
        for edge in graph.callers(helper):
            if not edge.handed and _in_a_distributed_program(edge.facts, region):
                found.add(edge.caller)
    return found


def _programs_in(region: set[Function]) -> Callable[[ScriptFacts], bool]:
    """Whether a file belongs to a program with code in `region` (once per file): a caller of
    a helper that is rank code for one program (main.py's get_loader) is not made rank code
    by it in another program that imports the same helper (a one-process test.py)."""
    answers: dict[int, bool] = {}

    def in_program(facts: ScriptFacts) -> bool:
        if id(facts) not in answers:
            answers[id(facts)] = _in_a_distributed_program(facts, region)
        return answers[id(facts)]

    return in_program


def _in_a_distributed_program(facts: ScriptFacts, region: set[Function]) -> bool:
    programs = [
        program
        for program in facts.project.files.values()
        if is_entry_point(program) and any(f is facts for f in imported_closure(program))
    ]
    return not programs or any(
        unit in region for program in programs for unit in (program.module_unit, *program.functions)
    )


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


def _launch_parameters(unit: Function, site: CallSite) -> set[str]:
    """The parameters a mark's launch condition tests (`DistributedSampler(d) if rank != -1
    else None` in `def create_dataloader(..., rank=-1)`): a caller that passes -1 gets no
    rank code from it. Empty when the mark does not hang on a parameter."""
    found: set[str] = set()
    for branch in site.ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is None or launch_of_arm(test, branch.arm) != DISTRIBUTED:
            continue
        tested = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)} & set(unit.params)
        if not tested:
            return set()
        found |= tested
    return found


def _passes_no_launch(edge: Edge, name: str) -> bool:
    """The call gives the parameter -1 (no launcher), or leaves it at a default of -1."""
    callee = edge.callee
    index = callee.params.index(name)
    value = edge.site.argument(index, name)
    if value is None:
        value = _default_of(callee.node.args, name)
    return value is not None and _is_minus_one(value)


def _default_of(arguments: ast.arguments, name: str) -> ast.expr | None:
    positional = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    first_defaulted = len(positional) - len(arguments.defaults)
    if name in positional and positional.index(name) >= first_defaulted:
        return arguments.defaults[positional.index(name) - first_defaulted]
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        if argument.arg == name:
            return default
    return None


def _is_minus_one(value: ast.expr) -> bool:
    return (
        isinstance(value, ast.UnaryOp)
        and isinstance(value.op, ast.USub)
        and isinstance(value.operand, ast.Constant)
        and value.operand.value == 1
    )


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
            held = _flags_of(site.ctx)
            on |= held[0]
            off |= held[1]
            for edge in graph.callers(unit):  # a caller's off arm of an option the init holds
                caller_on, caller_off = _flags_of(edge.site.ctx)  # on itself inits nothing
                on |= caller_on
                off |= caller_off - held[0]
    found = frozenset((on - off) | (_collective_flags(graph) - off))
    graph.__dict__["_launch_flags"] = found
    return found


def _flags_of(ctx: Context) -> tuple[set[str], set[str]]:
    """The options whose on arm, and those whose off arm, the code is in."""
    on: set[str] = set()
    off: set[str] = set()
    for branch in ctx.branches:
        name, holds = flag_of(getattr(branch.node, "test", None))
        if name is not None:
            (on if branch.arm == holds else off).add(name)
    return on, off


def _collective_flags(graph: CallGraph) -> set[str]:
    """Options that hold every collective of a file in their on arm (llama-cookbook's
    train_utils.py: each barrier and all_reduce under `if train_config.enable_fsdp:`, alone
    or in an `and`), where the init that the option starts is out of view: their off arm
    (`if not train_config.enable_fsdp: save_model_checkpoint(...)`) is the one-process path."""
    found: set[str] = set()
    for facts in graph.files():
        sites = facts.calls_to(*names.COLLECTIVES)
        if not sites:
            continue
        common: set[str] | None = None
        for site in sites:
            held = {name for branch in site.ctx.branches for name in _flags_on(branch)}
            common = held if common is None else common & held
            if not common:
                break
        found |= common or set()
    return found


def _flags_on(branch: Branch) -> set[str]:
    """Options the arm holds true: `if cfg.x:`, `if not cfg.x:` (else arm), `if a and cfg.x:`."""
    parts = _conjuncts(getattr(branch.node, "test", None))
    if len(parts) > 1 and not branch.arm:
        return set()  # `not (a and x)` says nothing about x
    found = set()
    for part in parts:
        name, holds = flag_of(part)
        if name is not None and branch.arm == holds:
            found.add(name)
    return found


def without_launch(ctx: Context, flags: frozenset[str]) -> bool:
    """Code taken only without a launcher: a single-process branch, or the off arm of an
    option that starts the process group."""
    if ctx.launch == SINGLE:
        return True
    for branch in ctx.branches:
        name, holds = flag_of(getattr(branch.node, "test", None))
        if name in flags and branch.arm != holds:
            return True
    return False


def single_process(site: CallSite) -> bool:
    """init_process_group(world_size=1), DistributedSampler(num_replicas=1): one process. So
    is a process group of the "fake" backend (torch.testing's FakeProcessGroup, a FakeStore):
    one process that simulates a world of ranks to trace or compile, with no job around it."""
    if site.key == "init_process_group" and fake_group(site):
        return True
    count = site.keyword("world_size") or site.keyword("num_replicas")
    if count is None and site.key == "init_process_group":
        count = site.argument(3, "world_size")
    return isinstance(count, ast.Constant) and count.value == 1


def fake_group(site: CallSite) -> bool:
    """A process group of the "fake" backend, or over a FakeStore: no processes, no resources."""
    backend = site.argument(0, "backend")
    if isinstance(backend, ast.Constant) and backend.value == "fake":
        return True
    store = site.keyword("store")
    return isinstance(store, ast.Call) and names.last_identifier(store.func) == "FakeStore"


def _conjuncts(test: ast.expr | None) -> list[ast.expr | None]:
    """The parts of an `and`, nested ones flattened: `a and (b and x)` -> [a, b, x]."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in _conjuncts(value)]
    return [test]
