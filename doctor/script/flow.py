"""Facts derived from the walk that several rules share: is the script distributed, which
values hold the DDP model, which functions run only on rank 0, and whether the rank's GPU was
pinned (set_device) on the way to a line.

Computed lazily, once per script, from the recorded facts and the tree's call graph and data
flow (callgraph.py, values.py); nothing here walks the AST again.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cached_property

from . import names
from .callgraph import DEPTH, CallGraph, Edge
from .facts import (
    SINGLE,
    Assignment,
    CallSite,
    Context,
    Function,
    ScriptFacts,
    position,
)
from .guards import is_rank_like
from .values import Values

_CUDA_DEVICE_PREFIX = "cuda"
_SETS_DEVICE = re.compile(r"set_?(cuda_?)?(default_)?device|setup_device", re.IGNORECASE)
_LIBRARY_SETUP = re.compile(r"(init_dist|setup_dist|launch)")
_PINNING_LIBRARIES = (
    "accelerate.Accelerator",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "torchtune.utils.get_device",  # calls torch.cuda.set_device for a CUDA device
    "torchtune.training.get_device",
)
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
    }
)
_MARK_KEYS = frozenset(name.rsplit(".", 1)[-1] for name in _DISTRIBUTED_MARKS)
_RANK_MARKS = _DISTRIBUTED_MARKS - names.SPAWN  # what runs inside a rank
_DIST_INITS = frozenset({"init", "setup", "init_distributed", "init_distributed_mode"})
_PIN_KEYS = frozenset(
    {"set_device", "device", "init_process_group", "Accelerator", "Fabric", "get_device"}
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


class Flow:
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
        return [c for c in self.facts.calls_to(names.INIT_PROCESS_GROUP) if not _single(c)]

    @cached_property
    def distributed_everywhere(self) -> bool:
        """A process group or DDP wrap outside any launch condition: the script always runs
        one process per GPU (not only under `if args.distributed:`)."""
        return any(site.ctx.launch is None for site in [*self.init_calls, *self.ddp_wraps])

    @cached_property
    def is_rpc(self) -> bool:
        """An RPC script: workers and parameter servers, not one process per GPU."""
        keys = self.facts.calls_by_key
        sites = [c for key in _RPC_KEYS for c in keys.get(key, ())]
        return any((self.facts.resolve(c) or "").startswith(_RPC) for c in sites)

    @cached_property
    def is_multiprocess(self) -> bool:
        """One process per GPU: a process group, DDP, a DistributedSampler or mp.spawn here,
        or code of this file that runs in the ranks a helper module starts."""
        facts = self.facts
        samplers = [s for s in facts.calls_to(names.DISTRIBUTED_SAMPLER) if not _single(s)]
        if self.init_calls or self.ddp_wraps or samplers or facts.calls_to(*names.SPAWN):
            return True
        region = distributed_region(self.graph)
        return any(unit in region for unit in [facts.module_unit, *facts.functions])

    @cached_property
    def set_device_calls(self) -> list[CallSite]:
        """Calls in this file that pin the rank's GPU themselves (not through a helper)."""
        return sorted((c for c in self.facts.calls if pins_device(self.facts, c)), key=position)

    @cached_property
    def pins_device_by_environment(self) -> bool:
        """CUDA_VISIBLE_DEVICES assigned per process: each rank then sees one GPU as cuda:0."""
        return any(
            access.writes
            and access.name == "CUDA_VISIBLE_DEVICES"
            and access.value is not None
            and self._per_rank(access.value, access.ctx)
            for access in self.facts.env
        )

    def _per_rank(self, value: ast.expr, ctx: Context) -> bool:
        """A value that differs per rank: the rank itself, mp.spawn's index, LOCAL_RANK (not
        a configured GPU list such as `gpu_id`)."""
        for node in ast.walk(value):
            name = (
                names.last_identifier(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            )
            if name is not None and "rank" in name.lower() and is_rank_like(node):
                return True
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
                for origin in self.values.origins(self.facts, node, ctx):
                    if origin.kind == "spawn-index" or (
                        origin.kind in ("env", "option") and "RANK" in origin.name.upper()
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
        return any(
            (name := facts.qualname(site.node.func)) is not None and name.startswith("torch.cuda.")
            for site in facts.calls
            if site.key in ("is_available", "device_count", "set_device", "synchronize")
        ) or any(self.is_cuda_device_literal(site) for site in facts.calls_by_key.get("to", ()))

    def is_cuda_device_literal(self, site: CallSite) -> bool:
        for arg in site.node.args[:1]:
            if isinstance(arg, ast.Constant) and str(arg.value).startswith(_CUDA_DEVICE_PREFIX):
                return True
        return False

    # pinned GPUs -----------------------------------------------------------------------------

    def _pin_sites(self, unit: Function) -> list[tuple[ScriptFacts, CallSite]]:
        return self.graph.sites_with(unit, "pins-device", pins_device)

    def pinned_before(self, ctx: Context, node: ast.AST, depth: int = DEPTH) -> bool:
        """Whether set_device (or a helper, a constructor or a library that calls it) ran
        before `node` on some path to it: earlier in its function outside the other arms of a
        condition, or earlier in a caller before the call, a few callers up."""
        unit = self.graph.unit(self.facts, ctx)
        if _earlier_pin(self._pin_sites(unit), ctx, node):
            return True
        edges = [e for e in self.graph.callers(unit) if not e.spawned]
        if depth <= 0:
            return False
        if not edges and not self.graph.callers(unit):
            return self._constructor_pins(unit) or self._pins_elsewhere(unit)
        return any(self._pinned_at_edge(edge, depth - 1) for edge in edges)

    def _pinned_at_edge(self, edge: Edge, depth: int) -> bool:
        if edge.handed:
            return True  # a callback: who runs it, and after what, is not in view
        return Flow.of(edge.facts).pinned_before(edge.site.ctx, edge.site.node, depth)

    def _constructor_pins(self, unit: Function) -> bool:
        """A method nobody in the tree calls: its class's __init__ runs first."""
        if unit.class_name is None:
            return False
        cls = self.facts.classes.get(unit.class_name)
        init = self.facts.project.method(cls, "__init__") if cls else None
        return init is not None and init is not unit and bool(self._pin_sites(init))

    def _pins_elsewhere(self, unit: Function) -> bool:
        """A function the tree never calls (a library's entry, a callback named in a config):
        who calls it first is not in view, so a pin anywhere else in the tree counts."""
        reach = self.graph.reaching("pins-device", pins_device)
        return any(depth == 0 and other is not unit for other, depth in reach.items())

    def calls_a_callback(self, ctx: Context, after: ast.AST) -> bool:
        """`init_process_group(...)` then `fn(*args)` with `fn` a parameter: the caller's
        function runs next, and may pin the GPU."""
        function = ctx.function
        if function is None:
            return False
        start = (after.lineno, after.col_offset)  # type: ignore[attr-defined]
        return any(
            isinstance(site.node.func, ast.Name)
            and site.node.func.id in function.params
            and position(site) > start
            for site in self.facts.calls
            if site.ctx.function is function
        )

    def pins_on_path(
        self, ctx: Context, at: ast.AST, depth: int = DEPTH
    ) -> list[tuple[ScriptFacts, CallSite, bool]]:
        """Pins in the function of `ctx` or in its callers, each with whether it runs before
        `at` (before the call that leads to `at`, in a caller). Callers are asked only when
        the function pins nothing before `at` itself."""
        return self._pins_on_path(ctx, at, depth, through=None)

    def _pins_on_path(
        self, ctx: Context, at: ast.AST, depth: int, through: ast.AST | None
    ) -> list[tuple[ScriptFacts, CallSite, bool]]:
        unit = self.graph.unit(self.facts, ctx)
        found = [
            (f, s, _runs_first(s.node, at))
            for f, s in self._pin_sites(unit)
            if not s.ctx.excludes(ctx) and s.node is not through  # the call on the way down
        ]
        if any(before for _, _, before in found) or depth <= 0:
            return found
        for edge in self.graph.callers(unit):
            if not edge.spawned:
                site = edge.site
                found += Flow.of(edge.facts)._pins_on_path(
                    site.ctx, site.node, depth - 1, site.node
                )
        return found

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

    def runs_on_rank_zero_only(self, ctx: Context) -> bool:
        return self.graph.runs_on_rank_zero_only(ctx)

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
        if ctx.launch == SINGLE:
            return False
        region = distributed_region(self.facts.project.graph)
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


def pins_device(facts: ScriptFacts, site: CallSite) -> bool:
    """A call that pins this process's GPU by itself."""
    key = site.key
    if key not in _PIN_KEYS | _DIST_INITS and not (
        _SETS_DEVICE.search(key) or _LIBRARY_SETUP.match(key)
    ):
        return False
    qualified = facts.resolve(site)
    if qualified in (names.SET_DEVICE, "torch.cuda.device"):
        return True
    if qualified is not None and qualified.startswith(_PINNING_LIBRARIES):
        return True
    if site.key == "init_process_group" and site.keyword("device_id") is not None:
        return True
    if qualified is not None and qualified.startswith("torch."):
        return False
    if facts.project.graph.targets(facts, site):
        return False  # a helper of the tree: the call graph says whether it pins
    if _SETS_DEVICE.search(site.key):
        return True
    if qualified is None:
        return False
    module = qualified.rpartition(".")[0]
    return bool(_LIBRARY_SETUP.match(key)) or (key in _DIST_INITS and "dist" in module)


def _runs_first(pin: ast.AST, at: ast.AST) -> bool:
    """The pin runs before (or as part of) `at`: earlier, the same call (init with
    device_id), or inside its arguments (`Runner(rank).start()` builds Runner first)."""
    if pin is at:
        return True
    end = (pin.end_lineno, pin.end_col_offset)  # type: ignore[attr-defined]
    start = (at.lineno, at.col_offset)  # type: ignore[attr-defined]
    stop = (at.end_lineno, at.end_col_offset)  # type: ignore[attr-defined]
    inside = (pin.lineno, pin.col_offset) >= start and end <= stop  # type: ignore[attr-defined]
    return end <= start or inside


def _earlier_pin(pins: list[tuple[ScriptFacts, CallSite]], ctx: Context, node: ast.AST) -> bool:
    here = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    for _, site in pins:
        if site.ctx.excludes(ctx):
            continue
        inside = site.node.lineno <= here[0] <= (site.node.end_lineno or 0)  # with cuda.device()
        if position(site) < here or inside:
            return True
    return False


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
            if site.key not in _MARK_KEYS:
                continue
            qualified = facts.resolve(site)
            unit = graph.unit(facts, site.ctx)
            if qualified in _RANK_MARKS and site.ctx.launch != SINGLE and not _single(site):
                seeds.add(unit)
            elif qualified in names.SPAWN:
                parents.add(unit)
                seeds |= {e.callee for e in graph.callees(unit) if e.site is site and e.spawned}

    parents |= _parent_only(graph, parents, seeds)

    def passes_up(edge: Edge) -> bool:
        return _runs_in_the_ranks(edge) and edge.caller not in parents

    callers = graph.closure(seeds, up=True, follow=passes_up)
    region = graph.closure(callers, up=False)
    graph.__dict__["_distributed_region"] = region
    return region


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


def _runs_in_the_ranks(edge: Edge) -> bool:
    """A call that passes the rank's code up to its caller: not mp.spawn (the caller is the
    parent), not one made only without a launcher (`if world_size == 1: run(0, 1)`)."""
    return not edge.spawned and edge.site.ctx.launch != SINGLE


def _single(site: CallSite) -> bool:
    """init_process_group(world_size=1), DistributedSampler(num_replicas=1): one process."""
    count = site.keyword("world_size") or site.keyword("num_replicas")
    if count is None and site.key == "init_process_group":
        count = site.argument(3, "world_size")
    return isinstance(count, ast.Constant) and count.value == 1


def flow_of(facts: ScriptFacts) -> Flow:
    """The shared derived facts of a script, computed once and kept on the facts object."""
    cached = facts.__dict__.get("_flow")
    if cached is None:
        cached = facts.__dict__["_flow"] = Flow(facts)
    return cached
