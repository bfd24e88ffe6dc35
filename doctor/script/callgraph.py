"""The call graph of the checked tree: who calls whom, and which functions reach an effect
(set_device, a print, a collective) a few calls deep.

What a call runs is resolve.py's answer. Module-level code is one more function per file
(`module_unit`). Edges are built in two passes: calls resolved by name first, then
`obj.method()` and callbacks, whose receivers' values the data flow finds over the first
pass's edges. Effects spread up from the calls that have them, at most `DEPTH` calls deep, so
the work is linear in the number of calls.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import NamedTuple

from ddp_doctor.script import names
from ddp_doctor.script.closure import star_definition
from ddp_doctor.script.facts import (
    SINGLE,
    ZERO,
    CallSite,
    ClassInfo,
    Context,
    Function,
    ScriptFacts,
)
from ddp_doctor.script.project import Project
from ddp_doctor.script.resolve import Resolver, imported_names, sorted_sites

DEPTH = 4  # calls followed below a function: helpers of helpers of helpers
_RANK_ZERO_DECORATORS = ("rank_zero", "main_process", "master_only", "rank0", "on_master")
_STARTERS = frozenset({"Process", "Thread", "spawn", "start_processes", "Pool", "submit"})


class Edge(NamedTuple):
    facts: ScriptFacts  # where the call is
    site: CallSite
    caller: Function  # the function (or module unit) the call is in
    callee: Function
    handed: bool = False  # the callee was passed to the call, not called by it
    spawned: bool = False  # ... to start a new process or thread with it


SitePredicate = Callable[[ScriptFacts, CallSite], bool]


def _always(facts: ScriptFacts, site: CallSite) -> bool:
    return True


class CallGraph:
    def __init__(self, project: Project) -> None:
        self.project = project
        self.resolver = Resolver(project)
        self._targets: dict[int, tuple[Function, ...]] = {}
        self._reach: dict[str, dict[Function, int]] = {}
        Index = tuple[dict[Function, list[Edge]], dict[Function, list[Edge]]]
        self._index: Index | None = None
        self._partial: Index | None = None

    def unit(self, facts: ScriptFacts, ctx: Context) -> Function:
        return ctx.function if ctx.function is not None else facts.module_unit

    # resolution ------------------------------------------------------------------------------

    def targets(self, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...]:
        """The functions of the tree a call runs (a class call runs its __init__)."""
        key = id(site.node)
        found = self._targets.get(key)
        if found is not None:
            return found
        if self._index is None and self._partial is None:
            self._edges  # noqa: B018  (resolves every call of the tree once)
            return self.targets(facts, site)
        found = self._by_name(facts, site)
        if found is None:  # needs the receiver's class: the data flow, once edges exist
            if self._index is None:
                return ()
            found = self.resolver.typed(facts, site)
        self._targets[key] = found
        return found

    def _by_name(self, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...] | None:
        """The resolver's answer, or the function a package re-exports with a star import."""
        found = self.resolver.by_name(facts, site)
        if found == () and isinstance(site.node.func, (ast.Name, ast.Attribute)):
            defined = star_definition(self.project, facts, site.node.func)
            if isinstance(defined, Function):
                return (defined,)
            if isinstance(defined, ClassInfo):
                init = self.project.method(defined, "__init__")
                return (init,) if init is not None else ()
        return found

    # edges -----------------------------------------------------------------------------------

    @property
    def _edges(self) -> tuple[dict[Function, list[Edge]], dict[Function, list[Edge]]]:
        """Out- and in-edges of every unit. Built in two passes: calls resolved by name first;
        then `obj.method()` calls, whose receiver's class the data flow finds over those
        edges. While it is built, the first pass's edges answer."""
        if self._index is not None:
            return self._index
        if self._partial is not None:
            return self._partial
        out: dict[Function, list[Edge]] = {}
        into: dict[Function, list[Edge]] = {}
        self._partial = (out, into)
        untyped: list[tuple[ScriptFacts, CallSite]] = []
        ordered = list(self.project.files.values())
        index = 0
        while index < len(ordered):
            facts = ordered[index]
            index += 1
            defined = self.project.defined_names | imported_names(facts)
            for site, hands in sorted_sites(facts, defined):
                if hands is None:
                    self._targets[id(site.node)] = ()
                    continue  # torch.save, x.to(...): nothing of the tree is called
                found = self._by_name(facts, site)
                if found is None:
                    untyped.append((facts, site))
                    found = ()
                else:
                    self._targets[id(site.node)] = found
                if found or hands:
                    self._add(facts, site, found, out, into, hands)
            if len(ordered) < len(self.project.files):  # resolving read an imported module
                ordered = list(self.project.files.values())
        handed_to = self._handed_to(out)
        for facts, site in untyped:
            if _calls_a_parameter(site) and site.ctx.function not in handed_to:
                found = ()  # model(batch), loss_fn(x): no function of the tree was handed here
            else:
                found = self.resolver.typed(facts, site)
            self._targets[id(site.node)] = found
            self._add(facts, site, found, out, into, False)
        self._index, self._partial = (out, into), None
        self.project.values.forget()  # answers given over the first pass's edges only
        return self._index

    @staticmethod
    def _handed_to(out: dict[Function, list[Edge]]) -> set[Function]:
        """Functions that may receive a function of the tree as an argument: those a call
        hands one to (launch(main) -> launch), and what they spawn or hand on."""
        receivers: set[Function] = set()
        for edges in out.values():
            for edge in edges:
                if edge.handed:
                    receivers |= {e.callee for e in out.get(edge.caller, ()) if e.site is edge.site}
        for receiver in list(receivers):
            receivers |= {e.callee for e in out.get(receiver, ()) if e.handed}
        return receivers

    def _add(
        self,
        facts: ScriptFacts,
        site: CallSite,
        found: tuple[Function, ...],
        out: dict[Function, list[Edge]],
        into: dict[Function, list[Edge]],
        handed: bool,
    ) -> None:
        if not found and not handed:
            return
        caller = self.unit(facts, site.ctx)
        edges = [Edge(facts, site, caller, f) for f in found]
        passed = self.resolver.handed(facts, site) if handed else ()
        if passed:
            spawned = site.key in _STARTERS or (facts.resolve(site) or "") in names.SPAWN
            edges += [Edge(facts, site, caller, f, True, spawned) for f in passed]
        for edge in edges:
            if edge.callee is not caller:  # recursion says nothing about who runs first
                out.setdefault(caller, []).append(edge)
                into.setdefault(edge.callee, []).append(edge)

    def files(self) -> list[ScriptFacts]:
        """Every file of the tree, after resolving calls has read the imported modules."""
        self._edges  # noqa: B018
        return list(self.project.files.values())

    def callees(self, unit: Function) -> list[Edge]:
        return self._edges[0].get(unit, [])

    def callers(self, unit: Function) -> list[Edge]:
        return self._edges[1].get(unit, [])

    # effects ---------------------------------------------------------------------------------

    def reaching(
        self, key: str, direct: SitePredicate, through: SitePredicate = _always
    ) -> dict[Function, int]:
        """Units that have an effect, with how many calls down it is (0: a call of their own).

        `direct` says which calls have the effect; `through` which calls pass it up (e.g. not
        one under a rank guard). Cached under `key`."""
        found = self._reach.get(key)
        if found is not None:
            return found
        found = {}
        for facts in self.files():
            for site in facts.calls:
                if direct(facts, site):
                    found.setdefault(self.unit(facts, site.ctx), 0)
        frontier = list(found)
        for depth in range(1, DEPTH + 1):
            reached = []
            for unit in frontier:
                for edge in self.callers(unit):
                    if edge.caller not in found and through(edge.facts, edge.site):
                        found[edge.caller] = depth
                        reached.append(edge.caller)
            frontier = reached
        self._reach[key] = found
        return found

    def sites_with(
        self, unit: Function, key: str, direct: SitePredicate, through: SitePredicate = _always
    ) -> list[tuple[ScriptFacts, CallSite]]:
        """The calls in `unit` that have the effect or lead to it."""
        reach = self.reaching(key, direct, through)
        depth = reach.get(unit)
        if depth is None:
            return []
        facts = self.project.owner(unit)
        found = [
            (facts, site)
            for site in facts.calls
            if self.unit(facts, site.ctx) is unit and direct(facts, site)
        ]
        for edge in self.callees(unit):
            below = reach.get(edge.callee)
            if below is None or below >= DEPTH or edge.spawned:
                continue
            if through(edge.facts, edge.site):
                found.append((edge.facts, edge.site))
        return found

    # ranks -----------------------------------------------------------------------------------

    @cached_property
    def rank_zero_units(self) -> set[Function]:
        """Functions that only ever run on rank 0: decorated so, or every call guarded so."""
        return self._guarded(lambda ctx, known: _zero_at(ctx, known))

    @cached_property
    def rank_guarded_units(self) -> set[Function]:
        """Functions that only run on some ranks (either side of a rank guard)."""
        return self._guarded(lambda ctx, known: ctx.guard is not None or ctx.function in known)

    def _guarded(self, guarded_at: Callable[[Context, set[Function]], bool]) -> set[Function]:
        known: set[Function] = set()
        functions = [f for facts in self.files() for f in facts.functions]
        for function in functions:
            lowered = [d.lower() for d in function.decorators]
            if any(mark in d for d in lowered for mark in _RANK_ZERO_DECORATORS):
                known.add(function)
        changed = True
        rounds = 0
        while changed and rounds <= DEPTH * 2:
            changed, rounds = False, rounds + 1
            for function in functions:
                if function in known:
                    continue
                calls = [e for e in self.callers(function) if not e.handed]
                if calls and all(guarded_at(e.site.ctx, known) for e in calls):
                    known.add(function)
                    changed = True
        return known

    def runs_on_rank_zero_only(self, ctx: Context) -> bool:
        return _zero_at(ctx, self.rank_zero_units)

    def runs_on_some_ranks_only(self, ctx: Context) -> bool:
        return ctx.guard is not None or ctx.function in self.rank_guarded_units

    # loops -----------------------------------------------------------------------------------

    def called_in_loop(
        self, unit: Function | None, depth: int = DEPTH, within: set[Function] | None = None
    ) -> bool:
        """Whether some call of the function runs inside a loop, a few callers up (only
        callers `within` a set of functions, when given: the distributed region, less the
        calls made only without a launcher)."""
        if unit is None or depth <= 0:
            return False
        return any(
            edge.site.ctx.loops or self.called_in_loop(edge.site.ctx.function, depth - 1, within)
            for edge in self.callers(unit)
            if not edge.handed
            and (within is None or (edge.caller in within and edge.site.ctx.launch != SINGLE))
        )

    def in_loop(
        self, ctx: Context, depth: int = DEPTH, within: set[Function] | None = None
    ) -> bool:
        """Inside a loop, or in a function called in one (at most `depth` calls up)."""
        return bool(ctx.loops) or self.called_in_loop(ctx.function, depth, within)

    # reach -----------------------------------------------------------------------------------

    def closure(
        self,
        start: Iterable[Function],
        *,
        up: bool,
        depth: int | None = None,
        follow: Callable[[Edge], bool] | None = None,
    ) -> set[Function]:
        """`start` with every function that calls it (up) or that it calls (down), any depth
        or at most `depth` calls away, along the edges `follow` accepts."""
        found = set(start)
        frontier = list(found)
        level = 0
        while frontier and (depth is None or level < depth):
            level += 1
            reached_now = []
            for unit in frontier:
                edges = self.callers(unit) if up else self.callees(unit)
                for edge in edges:
                    if follow is not None and not follow(edge):
                        continue
                    reached = edge.caller if up else edge.callee
                    if reached not in found:
                        found.add(reached)
                        reached_now.append(reached)
            frontier = reached_now
        return found


def _calls_a_parameter(site: CallSite) -> bool:
    function = site.ctx.function
    func = site.node.func
    return isinstance(func, ast.Name) and function is not None and func.id in function.params


def _zero_at(ctx: Context, known: set[Function]) -> bool:
    if ctx.guard is not None:
        return ctx.guard.polarity == ZERO
    return ctx.function is not None and ctx.function in known
