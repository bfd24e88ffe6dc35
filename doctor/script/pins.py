"""Whether the rank's GPU was pinned (torch.cuda.set_device, or a helper, constructor or
library set-up that calls it) on the way to a line: earlier in its function outside the other
arms of a condition, or in a caller before the call, a few callers up (never across mp.spawn:
a spawned process starts afresh).
"""

from __future__ import annotations

import ast
import functools
import os
import re
from typing import TYPE_CHECKING

from ddp_doctor.script import names
from ddp_doctor.script.callbacks import handed_functions
from ddp_doctor.script.callgraph import DEPTH, CallGraph, Edge
from ddp_doctor.script.facts import CallSite, Context, Function, ScriptFacts, position

if TYPE_CHECKING:
    from ddp_doctor.script.flow import Flow

_SETS_DEVICE = re.compile(r"set_?(cuda_?)?(default_)?device|setup_device", re.IGNORECASE)
_LIBRARY_SETUP = re.compile(r"(init_dist|setup_dist|launch)")
_PINNING_LIBRARIES = (
    "accelerate.Accelerator",
    "accelerate.PartialState",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "torchtune.utils.get_device",  # calls torch.cuda.set_device for a CUDA device
    "torchtune.training.get_device",
)
# torch's own calls that pin the process's device: CUDA's, and the device-generic
# torch.accelerator API that pytorch/examples uses since torch 2.6 (set_device_idx was its
# first name); `torch.get_device_module(t).set_device(i)` has no qualified name and is caught
# by its method name below.
_TORCH_PINS = frozenset(
    {
        names.SET_DEVICE,
        "torch.accelerator.set_device_index",
        "torch.accelerator.set_device_idx",
        "torch.xpu.set_device",
        "torch.mps.set_device",
    }
)
# A DeviceMesh of a GPU type sets the current device from LOCAL_RANK (or global rank modulo
# the devices of the host) when the process has none yet: torch's device_mesh.py,
# `_setup_world_group_and_device`. A "cpu" mesh sets nothing.
_MESH_PINS = frozenset(
    {
        "torch.distributed.device_mesh.init_device_mesh",
        "torch.distributed.device_mesh.DeviceMesh",
        "torch.distributed.init_device_mesh",
        "torch.distributed.DeviceMesh",
    }
)
# Context managers: they pin the device only as `with torch.cuda.device(i):`.
_CONTEXT_PINS = frozenset({"torch.cuda.device", "torch.accelerator.device_index"})
_DIST_INITS = frozenset({"init", "setup", "init_distributed", "init_distributed_mode"})
_PIN_KEYS = frozenset(
    {
        "set_device",
        "set_device_index",
        "set_device_idx",
        "device_index",
        "device",
        "init_process_group",
        "Accelerator",
        "PartialState",
        "Fabric",
        "get_device",
        "init_device_mesh",
        "DeviceMesh",
    }
)


class Pins:
    """The pinning questions of Flow (a mixin: Flow has `facts` and `graph`)."""

    facts: ScriptFacts
    graph: CallGraph

    @staticmethod
    def of(facts: ScriptFacts) -> Flow:
        """The Flow of another file (Flow, the class this is mixed into, defines it)."""
        raise NotImplementedError

    def _flow(self, facts: ScriptFacts) -> Flow:
        return type(self).of(facts)

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
            if unit is self.facts.module_unit:
                return False  # the program's start: nothing of the tree ran before it
            return self._constructor_pins(unit) or self._pins_elsewhere(unit)
        return any(self._pinned_at_edge(edge, depth - 1) for edge in edges)

    def _pinned_at_edge(self, edge: Edge, depth: int) -> bool:
        if edge.handed:
            return True  # a callback: who runs it, and after what, is not in view
        return self._flow(edge.facts).pinned_before(edge.site.ctx, edge.site.node, depth)

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
            and not _rebound_before(function.node, site.node.func.id, site)
            and self._handed_may_pin(function, site.node.func.id)
            for site in self.facts.calls
            if site.ctx.function is function
        )

    def _handed_may_pin(self, function: Function, param: str) -> bool:
        """The function handed in as `param` may pin: unknown (a caller out of view, or one
        handing in something else), or a known one that pins (callbacks.py)."""
        handed = handed_functions(self.graph, function, param)
        if handed is None:
            return True
        reach = self.graph.reaching("pins-device", pins_device)
        return any(callee in reach for callee in handed)

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
                found += self._flow(edge.facts)._pins_on_path(
                    site.ctx, site.node, depth - 1, site.node
                )
        return found


def pins_device(facts: ScriptFacts, site: CallSite) -> bool:
    """A call that pins this process's GPU by itself."""
    key = site.key
    if not _may_pin(key):
        return False
    qualified = facts.resolve(site)
    if qualified in _CONTEXT_PINS:
        return id(site.node) in with_items(facts)  # a bare call pins nothing
    if qualified in _TORCH_PINS:
        return True
    if qualified in _MESH_PINS:
        return not _cpu_mesh(site)
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
    if _LIBRARY_SETUP.match(key) or (key in _DIST_INITS and "dist" in module):
        return True
    return bool(_OWN_SETUP.match(key)) and _unseen_own_setup(facts, qualified)


# A set-up helper of the project's own package: `setup_and_build_model(args)` (dinov2's eval
# scripts, whose dinov2/eval/setup.py calls distributed.enable(), which sets the device).
@functools.lru_cache(maxsize=4096)  # asked of every call of the tree: keys repeat
def _may_pin(key: str) -> bool:
    """A call by this name may pin the GPU (the look before resolving it)."""
    if key in _PIN_KEYS or key in _DIST_INITS:
        return True
    return bool(_SETS_DEVICE.search(key) or _LIBRARY_SETUP.match(key) or _OWN_SETUP.match(key))


_OWN_SETUP = re.compile(r"(default_)?setup(_|$)|enable(_|$)|init_(dist|env|device|process|ddp)")


def _unseen_own_setup(facts: ScriptFacts, qualified: str) -> bool:
    """A set-up helper of the file's own package whose module is not in the checked tree:
    what it sets up is out of view, so it may pin the device (a rule that cannot be sure
    stays silent). Only for a package the file sits in (dinov2.eval.setup for
    dinov2/eval/linear.py), never a library."""
    package = qualified.partition(".")[0]
    folders = os.path.dirname(os.path.abspath(facts.path)).split(os.sep)
    return bool(package) and package in folders


def _cpu_mesh(site: CallSite) -> bool:
    """`init_device_mesh("cpu", ...)`: the device type, by position or keyword, is "cpu"."""
    first = site.argument(0, "device_type")
    return isinstance(first, ast.Constant) and first.value == "cpu"


def with_items(facts: ScriptFacts) -> frozenset[int]:
    """ids of the expressions a `with` statement of the file enters (computed once)."""
    cached = facts.__dict__.get("_with_items")
    if cached is None:
        found = (
            {
                id(item.context_expr)
                for node in ast.walk(facts.tree)
                if isinstance(node, (ast.With, ast.AsyncWith))
                for item in node.items
            }
            if facts.tree is not None
            else set()
        )
        cached = facts.__dict__["_with_items"] = frozenset(found)
    return cached


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
        if site.ctx.excludes(ctx) or site.node is node:
            continue  # the call on the way down: its callee's own pins are asked there
        inside = site.node.lineno <= here[0] <= (site.node.end_lineno or 0)  # with cuda.device()
        if position(site) < here or inside:
            return True
    return False


def _rebound_before(scope: ast.AST, name: str, site: CallSite) -> bool:
    """`model = DistributedDataParallel(model.to(rank))` before `model(batch)`: the name no
    longer holds what the caller passed, so the call is no callback of the caller's."""
    return any(
        isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        and (node.lineno, node.col_offset) < position(site)
        and any(
            isinstance(t, ast.Name) and t.id == name
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for node in ast.walk(scope)
    )
