"""Facts derived from the walk that several rules share: which names hold a DDP-wrapped model,
which functions only run on rank 0 (through the call graph), whether the script is distributed.

Computed lazily, once per script, from the recorded facts; nothing here walks the AST again.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cached_property

from . import names
from .facts import ZERO, Assignment, CallSite, Context, Function, ScriptFacts, position
from .guards import is_rank_like

_RANK_ZERO_DECORATORS = ("rank_zero", "main_process", "master_only", "rank0", "on_master")
_CUDA_DEVICE_PREFIX = "cuda"
_SETS_DEVICE = re.compile(r"set_?(cuda_?)?(default_)?device|setup_device", re.IGNORECASE)
_LIBRARY_SETUP = re.compile(r"(init_dist|setup_dist|launch)")
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

    # calls and assignments -------------------------------------------------------------------

    @cached_property
    def site_of(self) -> dict[int, CallSite]:
        return {id(site.node): site for site in self.facts.calls}

    @cached_property
    def _assignment_of_candidate(self) -> dict[int, Assignment]:
        found: dict[int, Assignment] = {}
        for assignment in self.facts.assignments:
            for candidate in candidates(assignment.value):
                found.setdefault(id(candidate), assignment)
        return found

    def assignment_of(self, node: ast.AST) -> Assignment | None:
        """The assignment that stores `node` (directly or as one arm of a conditional)."""
        return self._assignment_of_candidate.get(id(node))

    def target_of(self, node: ast.AST) -> str | None:
        found = self.assignment_of(node)
        return found.target if found else None

    def is_call_to(self, node: ast.AST, *qualnames: str) -> bool:
        return isinstance(node, ast.Call) and self.facts.qualname(node.func) in qualnames

    # the distributed setup -------------------------------------------------------------------

    @cached_property
    def ddp_wraps(self) -> list[CallSite]:
        return self.facts.calls_to(names.DDP)

    @cached_property
    def init_calls(self) -> list[CallSite]:
        """init_process_group calls, less single-process ones (world_size=1)."""
        return [c for c in self.facts.calls_to(names.INIT_PROCESS_GROUP) if not _single(c)]

    @cached_property
    def is_multiprocess(self) -> bool:
        """One process per GPU: a process group, DDP, a DistributedSampler or mp.spawn."""
        facts = self.facts
        samplers = [s for s in facts.calls_to(names.DISTRIBUTED_SAMPLER) if not _single(s)]
        return bool(self.init_calls or self.ddp_wraps or samplers or facts.calls_to(*names.SPAWN))

    @cached_property
    def set_device_calls(self) -> list[CallSite]:
        facts = self.facts
        found = facts.calls_to("torch.cuda.device")
        found += [c for c in facts.calls if _SETS_DEVICE.search(c.key)]  # helpers too
        found += [  # colossalai.launch, mmengine's init_dist: library set-ups that pin the GPU
            c
            for c in facts.calls
            if _LIBRARY_SETUP.match(c.key)
            and facts.resolve(c) is not None
            and not facts.resolve(c).startswith("torch.")  # type: ignore[union-attr]
        ]
        found += [c for c in self.init_calls if c.keyword("device_id") is not None]
        return sorted(found, key=position)

    @cached_property
    def pins_device_by_environment(self) -> bool:
        """CUDA_VISIBLE_DEVICES assigned per process: each rank then sees one GPU as cuda:0."""
        return any(
            access.writes
            and access.name == "CUDA_VISIBLE_DEVICES"
            and access.value is not None
            and any(is_rank_like(node) for node in ast.walk(access.value))
            for access in self.facts.env
        )

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
        """Whether `expression` (a name or `self.x`) holds a DDP model where `at` runs."""
        text = names.dotted(expression)
        if text is None or text not in self.wrapped:
            return False
        for assignment in self.wrapped[text]:
            if assignment.ctx.function is ctx.function:
                if _before(assignment.node, at):
                    return True
            elif text.startswith("self.") or assignment.ctx.module_level:
                return True
        return False

    # rank guards through the call graph ------------------------------------------------------

    def local_call_sites(self, function: Function) -> list[CallSite]:
        """Calls that may reach a function defined in this file (by its name)."""
        sites = []
        for site in self.facts.calls_by_key.get(function.name, ()):
            func = site.node.func
            if site.ctx.function is function:
                continue  # recursion says nothing about who calls it first
            if isinstance(func, ast.Name):
                local = self.facts.imports.names.get(func.id) is None
            else:  # obj.method(): not torch.save when a method is named save
                local = function.class_name is not None and self.facts.qualname(func) is None
            if local:
                sites.append(site)
        if function.class_name is None:
            return sites
        return self._method_sites(function, sites)

    def _method_sites(self, method: Function, sites: list[CallSite]) -> list[CallSite]:
        """For a method, `self.save()` and `trainer.save()` (trainer = Trainer(...)) beat
        `frame.save()` on some other object, when there are any."""
        instances = self._instances.get(method.class_name or "", set())
        typed = [
            s
            for s in sites
            if isinstance(s.node.func, ast.Name)
            or names.dotted(s.receiver) in ("self", "cls")  # type: ignore[arg-type]
            or names.dotted(s.receiver) in instances  # type: ignore[arg-type]
        ]
        return typed or sites

    @cached_property
    def _instances(self) -> dict[str, set[str]]:
        """Class name -> names assigned an instance of it: `trainer = Trainer(...)`."""
        found: dict[str, set[str]] = {}
        for assignment in self.facts.assignments:
            value = assignment.value
            if isinstance(value, ast.Call):
                name = names.last_identifier(value.func)
                if name and name[:1].isupper():
                    found.setdefault(name, set()).add(assignment.target)
        return found

    @cached_property
    def rank_zero_functions(self) -> set[str]:
        """Functions that only ever run on rank 0: decorated so, or every call site guarded."""
        return self._guarded_functions(lambda site, guarded: self._zero_at(site.ctx, guarded))

    @cached_property
    def rank_guarded_functions(self) -> set[str]:
        """Functions that only run on some ranks (either side of a rank guard)."""
        return self._guarded_functions(lambda site, guarded: self._some_ranks_at(site.ctx, guarded))

    def _guarded_functions(self, guarded_site) -> set[str]:  # type: ignore[no-untyped-def]
        guarded = {
            f.qualname
            for f in self.facts.functions
            if any(mark in d.lower() for d in f.decorators for mark in _RANK_ZERO_DECORATORS)
        }
        sites = {f.qualname: self.local_call_sites(f) for f in self.facts.functions}
        changed = True
        while changed:
            changed = False
            for function in self.facts.functions:
                calls = sites[function.qualname]
                if function.qualname in guarded or not calls:
                    continue
                if all(guarded_site(site, guarded) for site in calls):
                    guarded.add(function.qualname)
                    changed = True
        return guarded

    @staticmethod
    def _zero_at(ctx: Context, guarded: set[str]) -> bool:
        if ctx.guard is not None:
            return ctx.guard.polarity == ZERO
        return ctx.function is not None and ctx.function.qualname in guarded

    @staticmethod
    def _some_ranks_at(ctx: Context, guarded: set[str]) -> bool:
        if ctx.guard is not None:
            return True
        return ctx.function is not None and ctx.function.qualname in guarded

    def runs_on_rank_zero_only(self, ctx: Context) -> bool:
        return self._zero_at(ctx, self.rank_zero_functions)

    def runs_on_some_ranks_only(self, ctx: Context) -> bool:
        return self._some_ranks_at(ctx, self.rank_guarded_functions)

    @cached_property
    def _passed_as_argument(self) -> set[str]:
        """Names handed to a call: mp.spawn(main_worker, ...), Process(target=run)."""
        found: set[str] = set()
        for site in self.facts.calls:
            for value in [*site.node.args, *(kw.value for kw in site.node.keywords)]:
                if isinstance(value, ast.Name):
                    found.add(value.id)
                elif isinstance(value, ast.Attribute):
                    found.add(value.attr)
        return found

    def reachable(self, function: Function | None) -> bool:
        """Whether this file calls the function (or hands it to a call); module code always is."""
        if function is None:
            return True
        return bool(self.local_call_sites(function)) or function.name in self._passed_as_argument

    @cached_property
    def _callees(self) -> dict[str | None, set[str]]:
        """Call graph over this file's functions; None stands for module-level code."""
        edges: dict[str | None, set[str]] = {}
        for function in self.facts.functions:
            for site in self.local_call_sites(function):
                caller = site.ctx.function.qualname if site.ctx.function else None
                edges.setdefault(caller, set()).add(function.qualname)
        by_name = self.facts.functions_by_name
        for site in self.facts.calls:  # mp.spawn(main_worker, ...): the spawner reaches it
            caller = site.ctx.function.qualname if site.ctx.function else None
            for value in site.node.args:
                if isinstance(value, ast.Name):
                    for target in by_name.get(value.id, ()):
                        edges.setdefault(caller, set()).add(target.qualname)
        return edges

    @cached_property
    def distributed_region(self) -> set[str | None]:
        """Functions on a call path through distributed code: those that init, wrap, shard or
        communicate, their callers, and everything those call. Unrelated helpers and tests in
        the same file stay out. None stands for module-level code."""
        seeds: set[str | None] = set()
        for site in self.facts.calls:
            if site.key and self.facts.resolve(site) in _DISTRIBUTED_MARKS:
                seeds.add(site.ctx.function.qualname if site.ctx.function else None)
        callers: dict[str, set[str | None]] = {}
        for caller, callees in self._callees.items():
            for callee in callees:
                callers.setdefault(callee, set()).add(caller)
        region = _closure(seeds, callers)  # the seeds and whoever calls them
        return _closure(region, self._callees)  # and whatever those call

    def in_distributed_region(self, ctx: Context) -> bool:
        function = ctx.function
        while function is not None:
            if function.qualname in self.distributed_region:
                return True
            function = self._enclosing(function)
        return ctx.function is None and None in self.distributed_region

    def _enclosing(self, function: Function) -> Function | None:
        outer = function.qualname.rpartition(".")[0]
        return next((f for f in self.facts.functions if f.qualname == outer), None)

    def called_in_loop(self, function: Function | None) -> bool:
        if function is None:
            return False
        return any(site.ctx.loops for site in self.local_call_sites(function))


def _closure(start: set[str | None], edges: dict) -> set[str | None]:  # type: ignore[type-arg]
    found = set(start)
    stack = list(start)
    while stack:
        for reached in edges.get(stack.pop(), ()):
            if reached not in found:
                found.add(reached)
                stack.append(reached)
    return found


def _single(site: CallSite) -> bool:
    """init_process_group(world_size=1), DistributedSampler(num_replicas=1): one process."""
    count = site.keyword("world_size") or site.keyword("num_replicas")
    if count is None and site.key == "init_process_group":
        count = site.argument(3, "world_size")
    return isinstance(count, ast.Constant) and count.value == 1


def _before(first: ast.AST, second: ast.AST) -> bool:
    return (first.lineno, first.col_offset) < (second.lineno, second.col_offset)  # type: ignore


def flow_of(facts: ScriptFacts) -> Flow:
    """The shared derived facts of a script, computed once and kept on the facts object."""
    cached = facts.__dict__.get("_flow")
    if cached is None:
        cached = facts.__dict__["_flow"] = Flow(facts)
    return cached
