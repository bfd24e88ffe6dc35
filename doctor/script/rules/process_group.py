"""Rules about starting and ending the process group (DDP105, DDP106, DDP121)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.availability import asks_availability, tests_a_cuda_device
from ddp_doctor.script.callgraph import DEPTH, CallGraph
from ddp_doctor.script.defaults import with_defaults
from ddp_doctor.script.evidence import is_entry_point, never_runs_in_program, program_files
from ddp_doctor.script.facts import (
    DISTRIBUTED,
    SINGLE,
    CallSite,
    Context,
    Function,
    ScriptFacts,
    text_of,
)
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.gpuflags import guarded_by_gpu_flag
from ddp_doctor.script.hits import hit
from ddp_doctor.script.region import fake_group
from ddp_doctor.script.unseeninits import unseen_group_starts


@rule(
    "DDP105",
    Remediation(
        "Leave rank and world_size out under torchrun (env:// reads RANK and WORLD_SIZE), or "
        "pass the values the launcher gives each process."
    ),
)
def hardcoded_rank_or_world_size(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        init_process_group(..., rank=0) or world_size=4 written as a number (directly or
        through a module-level constant). rank=0 with world_size=1 together (a deliberate
        single-process group) is left alone, and so is a "fake" group (one process that
        simulates a world of ranks, as torchtitan's dry runs do).
    Why it matters:
        Every process then claims the same rank, or the group waits for a number of processes
        the launcher never starts: the rendezvous hangs until its timeout, or the store
        refuses a duplicate rank.
    Example:
        dist.init_process_group("nccl", rank=0, world_size=2)
    Fix:
        dist.init_process_group("nccl")  # under torchrun: RANK and WORLD_SIZE from the env
    """
    spawns_itself = bool(facts.calls_to(*names.SPAWN) or facts.calls_by_key.get("Process"))
    for init in facts.calls_to(names.INIT_PROCESS_GROUP):
        if fake_group(init):
            continue  # a fake world of ranks in one process, to trace or compile
        rank = _literal(facts, init.argument(4, "rank"))
        world = _literal(facts, init.argument(3, "world_size"))
        if world == 1 and rank in (0, None):
            continue
        if spawns_itself and rank is None:
            world = None  # the script starts that many processes itself
        for name, value in (("rank", rank), ("world_size", world)):
            if value is not None:
                node = init.argument(4 if name == "rank" else 3, name)
                yield hit(
                    facts,
                    node,
                    f"init_process_group gets a hard-coded {name}={value}: every process passes "
                    "the same value",
                    {name: value},
                )


def _literal(facts: ScriptFacts, node: ast.expr | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        assignments = facts.assignments_by_target.get(node.id, [])
        values = {
            _literal(facts, a.value) if isinstance(a.value, ast.Constant) else None
            for a in assignments
        }
        if len(assignments) == 1 and assignments[0].ctx.module_level and values != {None}:
            return values.pop()
    return None


@rule(
    "DDP106",
    Remediation(
        'backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"'
    ),
)
def nccl_without_fallback(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        init_process_group with the backend "nccl" (literally, as dist.Backend.NCCL, or through
        names that only ever hold either; an argparse option or a parameter nobody passes
        holds its default: `add_argument('--dist-backend', default='nccl')`) where no
        availability check (torch.cuda.is_available(), dist.is_nccl_available(),
        torch.cuda.device_count(); not dist.is_available(), which asks whether torch has the
        distributed package) chooses the backend: none in the backend's own expression, and
        none in a condition around the call or around the assignment of the backend, here or
        in a caller. A check that only sizes the world (world_size =
        torch.cuda.device_count()) is no fallback, nor is a switch on the operating system
        ('gloo' if os.name == 'nt' else 'nccl': Linux without GPUs still gets NCCL); a switch
        on a setting named for the hardware is the user's fallback (`'gloo' if
        config["use_cpu"] else 'nccl'`, `args.cpu`, `args.no_cuda`). A GPU
        requirement stated before the call (`assert torch.cuda.is_available()`, an assert on device_count(), an
        early exit `if not torch.cuda.is_available(): return`, also as one arm of an
        if/elif chain, a test skipped without GPUs; an assert on a name holding the count,
        `device_count() if torch.cuda.is_available() else 0` included; a test of the
        configured device against a CUDA one around the init or in an early exit before it,
        `if self.device != f"cuda:{local_rank}": raise`) counts as the choice: the script
        says it needs GPUs. So does a flag guarding the init that is off without CUDA, followed by
        the data flow whatever its name: set false under an availability check (`else:
        args.distributed = False` of `if torch.cuda.is_available()`, maskrcnn-benchmark's
        entry points) or stored from one (`distributed = torch.cuda.device_count() > 1`). So
        does an init reached only where a CPU setting's test is false: the else arm of `if
        args.local_rank == -1 or args.no_cuda:` (one disjunct switches to the CPU), a later
        arm of an if/elif chain whose earlier arm tests `no_cuda`, `use_cpu`, `device ==
        "cpu"` or `not args.cuda` (not a GPU setting's false arm, not `cpu_offload`). An init in a helper module's function that nothing in the program calls
        or names, beside another init that runs, never runs: not judged. A one-process
        group (`world_size=1`, for FSDP's CPU offloading or SyncBatchNorm in one process)
        is judged like any other: NCCL is loaded whatever the process count.
    Why it matters:
        On a laptop, a CPU-only CI runner, Windows or macOS the script dies with "Distributed
        package doesn't have NCCL built in" instead of running on gloo, so it cannot be
        smoke-tested without GPUs.
    Example:
        dist.init_process_group(backend="nccl")
    Fix:
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        dist.init_process_group(backend=backend)
    """
    inits = _process_groups(facts)
    for init in inits:
        backend = init.argument(0, "backend")
        if backend is None or not _only_nccl(facts, backend, init):
            continue
        if never_runs_in_program(facts, init.ctx.function) or _gloo_beside(inits, init):
            continue
        if _chosen_by_check(facts, init.ctx) or _checked_before(facts, init):
            continue
        if _on_a_cuda_device(init.ctx):
            continue
        if guarded_by_gpu_flag(facts, init.ctx):
            continue
        if _checked_in_callers(facts, init):
            continue
        yield hit(facts, backend, f"backend {text_of(backend)} is always NCCL: no CPU fallback")


def _only_nccl(facts: ScriptFacts, node: ast.expr, init: CallSite) -> bool:
    """Every value the backend may hold is the constant "nccl", and no check chose it."""
    values = facts.project.values
    if isinstance(node, ast.Constant) or _is_nccl_member(facts, node):
        return _is_nccl(facts, node)
    origins = with_defaults(values, facts, node, init.ctx)
    if not origins or not all(
        o.facts is not None and isinstance(o.node, ast.expr) and _is_nccl(o.facts, o.node)
        for o in origins
        if not _picked_for_the_platform(o)
    ):
        return False
    for origin in origins:
        assignment = flow_of(origin.facts).assignment_of(origin.node)  # type: ignore[arg-type]
        if assignment is not None and _chosen_by_check(origin.facts, assignment.ctx):  # type: ignore[arg-type]
            return False
    return True


def _picked_for_the_platform(origin) -> bool:  # type: ignore[no-untyped-def]
    """`'gloo' if os.name == 'nt' else 'nccl'`: the other backend is chosen by a test that
    is not about the GPUs (the operating system), so a machine without them still gets NCCL."""
    if origin.facts is None or not isinstance(origin.node, ast.expr):
        return False
    if _is_nccl(origin.facts, origin.node):
        return False
    assignment = flow_of(origin.facts).assignment_of(origin.node)
    value = assignment.value if assignment is not None else None
    if not isinstance(value, ast.IfExp) or origin.node not in (value.body, value.orelse):
        return False
    other = value.orelse if origin.node is value.body else value.body
    return _is_nccl(origin.facts, other) and not _about_gpus(value.test)


def _is_nccl(facts: ScriptFacts, node: ast.expr) -> bool:
    """The constant "nccl", or the enum member `dist.Backend.NCCL` (a str subclass)."""
    if isinstance(node, ast.Constant):
        return node.value == "nccl"
    return _is_nccl_member(facts, node)


def _is_nccl_member(facts: ScriptFacts, node: ast.expr) -> bool:
    if not isinstance(node, ast.Attribute) or node.attr != "NCCL":
        return False
    return facts.qualname(node) in ("torch.distributed.Backend.NCCL", "torch.distributed.NCCL")


def _chosen_by_check(facts: ScriptFacts, ctx: Context) -> bool:
    """A condition around this place asks whether CUDA or NCCL is there."""
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is not None and asks_availability(test):
            return True
    return False


def _on_a_cuda_device(ctx: Context) -> bool:
    """A condition around the init, or an early exit before it, tests the configured device
    against a CUDA one (`if self.device != f"cuda:{local_rank}": raise ...`)."""
    return any(
        (test := getattr(branch.node, "test", None)) is not None and tests_a_cuda_device(test)
        for branch in ctx.branches
    )


def _process_groups(facts: ScriptFacts) -> list[CallSite]:
    """Every init_process_group that needs its backend, one-process groups included
    (world_size=1 still loads NCCL); a fake group (no resources) is none."""
    return [c for c in facts.calls_to(names.INIT_PROCESS_GROUP) if not fake_group(c)]


def _gloo_beside(inits: list[CallSite], init: CallSite) -> bool:
    """`if gpu_id >= 0: init("nccl") else: init("gloo")`: the other arm is the fallback."""
    for other in inits:
        if other is init or other.ctx.function is not init.ctx.function:
            continue
        if not _is_backend(other, "gloo") or not other.ctx.excludes(init.ctx):
            continue
        arms = {id(b.node): b.arm for b in other.ctx.branches}
        splits = [b.node for b in init.ctx.branches if arms.get(id(b.node), b.arm) != b.arm]
        if any(_about_gpus(getattr(node, "test", None)) for node in splits):
            return True
    return False


def _about_gpus(test: ast.expr | None) -> bool:
    """A condition on the GPUs (`gpu_id >= 0`, `args.cuda`, `cfg["use_cpu"]`: a choice of
    the hardware, also as a configuration key), not on the cluster (SLURM)."""
    if test is None:
        return False
    return asks_availability(test) or any(
        any(word in name.lower() for word in _HARDWARE_WORDS)
        for name in map(_named, ast.walk(test))
        if name
    )


_HARDWARE_WORDS = ("gpu", "cuda", "device", "cpu")


def _named(node: ast.AST) -> str | None:
    """The identifier a test reads: `args.use_cpu`, or the key of `config["use_cpu"]`."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return names.last_identifier(node)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value if isinstance(node.slice.value, str) else None
    return None


def _is_backend(init: CallSite, name: str) -> bool:
    backend = init.argument(0, "backend")
    return isinstance(backend, ast.Constant) and backend.value == name


def _checked_before(facts: ScriptFacts, site: CallSite) -> bool:
    """`assert torch.cuda.device_count() >= 2` earlier in the function, or a decorator such
    as `@unittest.skipIf(torch.cuda.device_count() < 2, ...)` on it."""
    function = site.ctx.function
    if function is not None and any(asks_availability(d) for d in function.node.decorator_list):
        return True
    return any(
        ctx.function is function
        and (statement.lineno, statement.col_offset) < (site.node.lineno, site.node.col_offset)
        and asks_availability(statement.test, facts, ctx)
        for statement, ctx in facts.asserts
    )


def _checked_in_callers(facts: ScriptFacts, init: CallSite, depth: int = DEPTH) -> bool:
    """A check around a call on the way here, up to `depth` callers (mp.spawn included)."""
    graph = facts.project.graph
    frontier = [(facts, init.ctx)]
    for _ in range(depth):
        callers = []
        for owner, ctx in frontier:
            for edge in graph.callers(graph.unit(owner, ctx)):
                if _chosen_by_check(edge.facts, edge.site.ctx):
                    return True
                if guarded_by_gpu_flag(edge.facts, edge.site.ctx):
                    return True
                if _checked_before(edge.facts, edge.site):
                    return True
                callers.append((edge.facts, edge.site.ctx))
        frontier = callers
    return False


@rule("DDP121", Remediation("Call dist.destroy_process_group() at the end, in a finally: block."))
def destroy_process_group_missing(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        A script that calls init_process_group and never destroy_process_group: not itself,
        not through a helper of the checked tree (a `cleanup()` in utils/dist.py), not in a
        caller. A one-process group (for SyncBatchNorm without DDP) is not ended by a destroy
        that runs only under `if is_ddp:`, and no group is ended by a destroy in a function of
        the script that nothing calls (a helper module's functions are its API and count).
        A destroy in the entry point of a program that imports the module counts too (a
        trainer built from its configuration, `config.build()`, that the calls cannot be
        followed into). A "fake" group (`init_process_group("fake", ...)`, a FakeStore) holds nothing to end.
        An init in a function of a helper module that nothing in the program calls or
        names, beside another init that runs, never runs: not judged. A set-up helper out of
        view whose name says it starts the group (`utils.init_distributed_mode(args)` of the
        DeiT/DINO family, `init_dist`, `setup_distributed`; not a library's) counts as the
        init, on its call, when the program ends nothing (no destroy, no cleanup-like call);
        a helper the tree defines in a module the import names under a search path the
        imports cannot follow (CvT's `import _init_paths`, then `from utils.utils import
        init_distributed`, in lib/utils/utils.py) is in view: judged at its own init.
    Why it matters:
        Since torch 2.4 the process group left open at exit prints "process group has NOT been
        destroyed before we destruct ProcessGroupNCCL" on every rank, and NCCL resources may be
        leaked or the exit may hang on some versions.
    Example:
        dist.init_process_group("nccl")
        train()
    Fix:
        dist.init_process_group("nccl")
        try:
            train()
        finally:
            dist.destroy_process_group()
    """
    inits = [  # a one-process group too (SyncBatchNorm), not a fake one (no resources)
        init
        for init in facts.calls_to(names.INIT_PROCESS_GROUP)
        if not fake_group(init) and not never_runs_in_program(facts, init.ctx.function)
    ]
    if not inits:
        yield from _unseen_starts(facts)
        return
    if any(
        names.last_identifier(value) == "destroy_process_group"
        for site in facts.calls
        for value in site.node.args
    ):
        return  # atexit.register(dist.destroy_process_group)
    graph = facts.project.graph
    for init in inits:
        single = init.ctx.launch == SINGLE or _one_process(init)
        key, direct = ("destroys-single", _destroys_single) if single else ("destroys", _destroys)
        reach = set(graph.reaching(key, direct)) & live_units(graph, facts, inits)
        if any(graph.unit(facts, site.ctx) in reach for site in facts.calls):
            return
        starters = {graph.unit(facts, init.ctx)}
        if graph.closure(starters, up=True, depth=DEPTH) & reach:
            continue  # a caller (in another module) ends the group: run() { setup(); destroy() }
        if _entry_point_destroys(facts, reach):
            continue
        yield hit(facts, init.node, "init_process_group has no matching destroy_process_group()")
        return


def live_units(graph: CallGraph, facts: ScriptFacts, inits: list[CallSite]) -> set[Function]:
    """Code that runs: module code, methods (a framework may call them), every function of a
    module that is imported rather than run (its API: `setup()` and `cleanup()` of a helper
    module), the functions that init the group (the rule's premise is that they run), and
    what those call or are handed. A function of a script that nothing calls (a `cleanup()`
    left unused in train.py) is not."""
    cached = graph.__dict__.get("_live_units")
    if cached is None:
        roots = [
            unit
            for other in graph.files()
            for unit in (other.module_unit, *other.functions)
            if unit is other.module_unit or unit.class_name is not None or not is_entry_point(other)
        ]
        cached = graph.__dict__["_live_units"] = graph.closure(roots, up=False)
    starters = {graph.unit(facts, init.ctx) for init in inits}
    return cached | graph.closure(graph.closure(starters, up=True, depth=DEPTH), up=False)


def _entry_point_destroys(facts: ScriptFacts, reach: set[Function]) -> bool:
    """An entry point of a program this module belongs to ends the group in code that runs
    (torchtitan's train.py: `trainer = config.build()`, train, `destroy_process_group()`): a
    trainer built from its configuration reaches the init by a call the graph cannot name."""
    return any(
        unit in reach
        for mate in program_files(facts)
        if mate is not facts and is_entry_point(mate)
        for unit in (mate.module_unit, *mate.functions)
    )


def _destroys(facts: ScriptFacts, site: CallSite) -> bool:
    return site.key == "destroy_process_group"


def _destroys_single(facts: ScriptFacts, site: CallSite) -> bool:
    """A destroy that also runs without a launcher (not only under `if is_ddp:`)."""
    return _destroys(facts, site) and site.ctx.launch != DISTRIBUTED


def _one_process(init: CallSite) -> bool:
    count = init.keyword("world_size") or init.argument(3, "world_size")
    return isinstance(count, ast.Constant) and count.value == 1


def _unseen_starts(facts: ScriptFacts) -> Iterator[Hit]:
    for site in unseen_group_starts(facts)[:1]:
        yield hit(
            facts,
            site.node,
            f"{text_of(site.node.func)}() starts the process group and nothing in the program "
            "calls destroy_process_group()",
        )
