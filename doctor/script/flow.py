"""Facts derived from the walk that several rules share: is the script distributed, which
values hold the DDP model, which functions run only on rank 0, and whether the rank's GPU was
pinned (set_device) on the way to a line.

Computed lazily, once per script, from the recorded facts and the tree's call graph and data
flow (callgraph.py, values.py); nothing here walks the AST again.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cached_property

from ddp_doctor.script import names
from ddp_doctor.script.callgraph import CallGraph
from ddp_doctor.script.devicemaps import places_by_device_map
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import (
    Assignment,
    CallSite,
    Context,
    Function,
    ScriptFacts,
    position,
)
from ddp_doctor.script.guards import is_rank_like
from ddp_doctor.script.pins import Pins, pins_device
from ddp_doctor.script.region import (
    distributed_region,
    launch_flags,
    single_process,
    without_launch,
)
from ddp_doctor.script.values import Values

_CUDA_DEVICE_PREFIX = "cuda"
# torch.cuda's device calls, and torch.accelerator's (the device-generic API that
# pytorch/examples uses since torch 2.6: CUDA wherever a GPU is)
_DEVICE_API_KEYS = frozenset(
    {
        "is_available",
        "device_count",
        "set_device",
        "synchronize",
        "current_accelerator",
        "set_device_index",
        "set_device_idx",
    }
)
_RPC = ("torch.distributed.rpc.init_rpc", "torch.distributed.rpc.")
_RPC_KEYS = ("init_rpc", "rpc_sync", "rpc_async", "remote")


def candidates(value: ast.AST) -> Iterator[ast.AST]:
    """The values an expression may evaluate to: both arms of `a if c else b`, `a or b`."""
    if isinstance(value, ast.IfExp):
        yield from candidates(value.body)
        yield from candidates(value.orelse)
    elif isinstance(value, ast.BoolOp):
        for part in value.values:
            yield from candidates(part)
    elif isinstance(value, ast.NamedExpr):
        yield from candidates(value.value)
    else:
        yield value


class Flow(Pins):
    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.graph: CallGraph = facts.project.graph
        self.values: Values = facts.project.values

    # calls and assignments -------------------------------------------------------------------

    @cached_property
    def _assignment_of_candidate(self) -> dict[int, Assignment]:
        found: dict[int, Assignment] = {}
        for assignment in self.facts.assignments:
            if assignment.element:
                continue
            for candidate in candidates(assignment.value):
                found.setdefault(id(candidate), assignment)
        return found

    def assignment_of(self, node: ast.AST) -> Assignment | None:
        """The assignment that stores `node` (directly or as one arm of a conditional)."""
        return self._assignment_of_candidate.get(id(node))

    def target_of(self, node: ast.AST) -> str | None:
        found = self.assignment_of(node)
        return found.target if found else None

    def unit(self, ctx: Context) -> Function:
        return self.graph.unit(self.facts, ctx)

    # the distributed setup -------------------------------------------------------------------

    @cached_property
    def ddp_wraps(self) -> list[CallSite]:
        return self.facts.calls_to(names.DDP)

    @cached_property
    def init_calls(self) -> list[CallSite]:
        """init_process_group calls, less single-process ones (world_size=1)."""
        return [c for c in self.facts.calls_to(names.INIT_PROCESS_GROUP) if not single_process(c)]

    @cached_property
    def distributed_everywhere(self) -> bool:
        """A process group or DDP wrap outside any launch condition: the script always runs
        one process per GPU (not only under `if args.distributed:`, nor in a helper that
        every caller calls only under a flag: `if cfg.enable_fsdp: setup()`)."""
        return any(
            site.ctx.launch is None and not self._called_under_flags(site.ctx)
            for site in [*self.init_calls, *self.ddp_wraps]
        )

    def _called_under_flags(self, ctx: Context) -> bool:
        if ctx.function is None:
            return False
        callers = self.graph.callers(ctx.function)
        return bool(callers) and all(
            any(b.arm and _is_flag(getattr(b.node, "test", None)) for b in edge.site.ctx.branches)
            for edge in callers
        )

    @cached_property
    def is_rpc(self) -> bool:
        """An RPC script: workers and parameter servers, not one process per GPU."""
        keys = self.facts.calls_by_key
        sites = [c for key in _RPC_KEYS for c in keys.get(key, ())]
        return any((self.facts.resolve(c) or "").startswith(_RPC) for c in sites)

    @cached_property
    def is_multiprocess(self) -> bool:
        """One process per GPU: a process group, DDP, a DistributedSampler, mp.spawn or an
        accelerate Accelerator here, or code of this file that runs in the ranks a helper
        module starts."""
        facts = self.facts
        samplers = [s for s in facts.calls_to(names.DISTRIBUTED_SAMPLER) if not single_process(s)]
        spawns_or_accelerates = facts.calls_to(
            *names.SPAWN, names.ACCELERATOR, *names.ACCELERATE_STATES
        )
        if self.init_calls or self.ddp_wraps or samplers or spawns_or_accelerates:
            return True
        region = distributed_region(self.graph)
        return any(unit in region for unit in [facts.module_unit, *facts.functions])

    @cached_property
    def set_device_calls(self) -> list[CallSite]:
        """Calls in this file that pin the rank's GPU themselves (not through a helper)."""
        return sorted((c for c in self.facts.calls if pins_device(self.facts, c)), key=position)

    @cached_property
    def pins_device_by_environment(self) -> bool:
        """CUDA_VISIBLE_DEVICES assigned per process, here or in a file of the program (ijepa's
        main.py sets it in each process it starts, then calls src/train.py's main): each rank
        then sees one GPU as cuda:0."""
        return self.sets_visible_devices_per_rank or any(
            flow_of(mate).sets_visible_devices_per_rank
            for mate in program_files(self.facts)
            if mate is not self.facts and mate.is_python
        )

    @cached_property
    def sets_visible_devices_per_rank(self) -> bool:
        """CUDA_VISIBLE_DEVICES assigned per process in this file."""
        return any(
            access.writes
            and access.name == "CUDA_VISIBLE_DEVICES"
            and access.value is not None
            and self._per_rank(access.value, access.ctx)
            for access in self.facts.env
        )

    def _per_rank(self, value: ast.expr, ctx: Context) -> bool:
        """A value that differs per rank: the rank itself, mp.spawn's index, LOCAL_RANK or
        SLURM's SLURM_LOCALID (not a configured GPU list such as `gpu_id`)."""
        for node in ast.walk(value):
            name = (
                names.last_identifier(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            )
            if name is not None and "rank" in name.lower() and is_rank_like(node):
                return True
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
                for origin in self.values.origins(self.facts, node, ctx):
                    if origin.kind == "spawn-index" or (
                        origin.kind in ("env", "option") and _names_a_rank(origin.name)
                    ):
                        return True
        return False

    @cached_property
    def uses_cuda(self) -> bool:
        facts = self.facts
        if facts.calls_by_key.get("cuda") or '"nccl"' in facts.source or "'nccl'" in facts.source:
            return True
        if any(wrap.argument(1, "device_ids") is not None for wrap in self.ddp_wraps):
            return True
        return (
            any(
                (name := facts.qualname(site.node.func)) is not None
                and name.startswith(("torch.cuda.", "torch.accelerator."))
                for site in facts.calls
                if site.key in _DEVICE_API_KEYS
            )
            or any(self.is_cuda_device_literal(site) for site in facts.calls_by_key.get("to", ()))
            or places_by_device_map(facts)
        )

    def is_cuda_device_literal(self, site: CallSite) -> bool:
        for arg in site.node.args[:1]:
            if isinstance(arg, ast.Constant) and str(arg.value).startswith(_CUDA_DEVICE_PREFIX):
                return True
        return False

    # DDP-wrapped models ----------------------------------------------------------------------

    @cached_property
    def wrapped(self) -> dict[str, list[Assignment]]:
        """Targets that hold a DDP-wrapped model: `model` in `model = DDP(model, ...)`."""
        found: dict[str, list[Assignment]] = {}
        for wrap in self.ddp_wraps:
            assignment = self.assignment_of(wrap.node)
            if assignment is not None:
                found.setdefault(assignment.target, []).append(assignment)
        return found

    def holds_wrapped_model(self, expression: ast.AST, ctx: Context, at: ast.AST) -> bool:
        """Whether `expression` may hold a DDP-wrapped model where it is used."""
        if names.access_path(expression) is None:
            return False
        return bool(self.values.calls_to(self.facts, expression, ctx, names.DDP))

    # ranks and regions -----------------------------------------------------------------------

    def runs_on_rank_zero_only(self, ctx: Context, depth: int = 3) -> bool:
        """Only rank 0 runs it, counting only the calls made in the ranks: a function that a
        stand-alone script of the tree also calls (`python test.py`, one process), or its
        own one-process arm (`else:` of `if n_gpus > 1:`), and that the trainer calls under
        `if rank in [-1, 0]:` runs on rank 0 of the job; so do the functions it calls."""
        if self.graph.runs_on_rank_zero_only(ctx):
            return True
        if ctx.function is None or ctx.guard is not None or depth <= 0:
            return False
        region, flags = distributed_region(self.graph), launch_flags(self.graph)
        calls = [e for e in self.graph.callers(ctx.function) if not e.handed]
        in_ranks = [
            e for e in calls if e.caller in region and not without_launch(e.site.ctx, flags)
        ]
        return bool(in_ranks) and all(
            self.runs_on_rank_zero_only(e.site.ctx, depth - 1) for e in in_ranks
        )

    def runs_on_some_ranks_only(self, ctx: Context) -> bool:
        return self.graph.runs_on_some_ranks_only(ctx)

    def local_call_sites(self, function: Function) -> list[CallSite]:
        """Calls of the function anywhere in the tree (handing it over included)."""
        return [edge.site for edge in self.graph.callers(function)]

    def reachable(self, function: Function | None) -> bool:
        """Whether the tree calls the function (or hands it to a call); module code always is."""
        return function is None or bool(self.graph.callers(function))

    def in_distributed_region(self, ctx: Context) -> bool:
        """On a call path through distributed code: functions that init, wrap, shard or
        communicate, their callers, and everything those call. Unrelated helpers and tests in
        the same file stay out, and so does a branch taken only without a launcher."""
        graph = self.facts.project.graph
        if without_launch(ctx, launch_flags(graph)):
            return False
        region = distributed_region(graph)
        function = ctx.function
        while function is not None:
            if function in region:
                return True
            function = self.facts.project.enclosing(self.facts, function)
        return ctx.function is None and self.facts.module_unit in region

    def called_in_loop(self, function: Function | None) -> bool:
        return self.graph.called_in_loop(function)

    @staticmethod
    def of(facts: ScriptFacts) -> Flow:
        return flow_of(facts)


def _is_flag(test: ast.expr | None) -> bool:
    """A boolean option tested as it is: `if args.distributed:`, `if cfg.enable_fsdp:`."""
    return isinstance(test, (ast.Name, ast.Attribute))


def flow_of(facts: ScriptFacts) -> Flow:
    """The shared derived facts of a script, computed once and kept on the facts object."""
    cached = facts.__dict__.get("_flow")
    if cached is None:
        cached = facts.__dict__["_flow"] = Flow(facts)
    return cached


def _names_a_rank(variable: str) -> bool:
    """LOCAL_RANK, RANK, OMPI_COMM_WORLD_LOCAL_RANK, and SLURM's per-task SLURM_LOCALID and
    SLURM_PROCID (V-JEPA's `CUDA_VISIBLE_DEVICES = os.environ['SLURM_LOCALID']`)."""
    upper = variable.upper()
    return "RANK" in upper or upper in ("SLURM_LOCALID", "SLURM_PROCID")
