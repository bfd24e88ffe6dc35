"""Where DDP107's late pin is reported when init_process_group sits in a helper and the pin in
its caller: on the caller's late pin, after its call of the helper, where the two meet.

efficientvit's `setup_dist_env()` (apps/setup.py) calls `dist_init()`, whose
init_process_group is in apps/utils/dist.py, and pins with `torch.cuda.set_device(...)` on the
next lines: the mistake is the order of setup.py's two lines, not the helper's init line (the
helper cannot pin before its own caller has chosen the device). The helper's file leaves such
an init to its callers; each caller's file reports it on its late pin (naming its call of
the helper).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import NamedTuple

from ddp_doctor.model import Severity
from ddp_doctor.registry import Hit
from ddp_doctor.script.callgraph import Edge
from ddp_doctor.script.facts import SINGLE, CallSite, ScriptFacts, position, text_of
from ddp_doctor.script.flow import Flow, flow_of
from ddp_doctor.script.hits import PROCESS_GROUP, hit, related_place, spelled_like


class Meeting(NamedTuple):
    """A caller's call of the helper that inits (`edge`), and its pin after that call."""

    edge: Edge
    pin: CallSite
    init: CallSite
    init_facts: ScriptFacts


def late_pins_in_callers(facts: ScriptFacts, flow: Flow, init: CallSite) -> list[Meeting]:
    """The direct callers of the init's function that pin only after calling it (and pin
    nothing before): one Meeting per such call. Empty for a module-level init, when any
    path pins before the init (then DDP107 has nothing to say), and when the init's own
    function pins after it (Lumina's distributed_init: the init's line is where they meet)."""
    unit = flow.graph.unit(facts, init.ctx)
    if unit is facts.module_unit:
        return []
    pins = flow.pins_on_path(init.ctx, init.node)
    if not pins or any(before for _, _, before in pins):
        return []
    if any(flow.graph.unit(owner, site.ctx) is unit for owner, site, _ in pins):
        return []  # the helper pins on its own lines after the init: they meet there
    found: list[Meeting] = []
    for edge in flow.graph.callers(unit):
        if edge.spawned or edge.handed:
            continue
        caller_pins = flow_of(edge.facts).pins_on_path(edge.site.ctx, edge.site.node, depth=0)
        later = [
            site
            for owner, site, before in caller_pins
            if owner is edge.facts and not before and site.node is not edge.site.node
        ]
        if later:
            found.append(Meeting(edge, min(later, key=position), init, facts))
    return found


def meetings_in(facts: ScriptFacts) -> list[Meeting]:
    """This file's calls of other functions' inits that it pins only after (see the module's
    text), with the init's own flow gating as DDP107 gates it."""
    graph = facts.project.graph
    found: list[Meeting] = []
    seen: set[int] = set()
    for site in facts.calls:
        for target in graph.targets(facts, site):
            owner = facts.project.owner(target)
            owner_flow = flow_of(owner)
            for init in owner_flow.init_calls:
                if init.ctx.function is not target or id(init.node) in seen:
                    continue
                seen.add(id(init.node))
                found += [
                    m
                    for m in late_pins_in_callers(owner, owner_flow, init)
                    if m.edge.facts is facts
                ]
    return sorted(found, key=lambda m: position(m.edge.site))


def judged(flow: Flow) -> bool:
    """DDP107's gate on a file's flow: it inits, uses CUDA, pins by no per-rank environment,
    and is no RPC-only program."""
    rpc_only = flow.is_rpc and not flow.ddp_wraps  # a DDP trainer of an RPC job still pins
    return (
        bool(flow.init_calls)
        and flow.uses_cuda
        and not (flow.pins_device_by_environment or rpc_only)
    )


def late_pin_hits(facts: ScriptFacts) -> Iterator[Hit]:
    """This file calls a helper that inits the group and pins only after the call
    (efficientvit's setup_dist_env: `dist_init()`, then set_device): reported on the call."""
    for meeting in meetings_in(facts):
        init, owner = meeting.init, meeting.init_facts
        if not judged(flow_of(owner)) or is_gloo(init) or init.ctx.launch == SINGLE:
            continue
        owner_path = spelled_like(owner.path, facts.path)
        where = f"line {init.node.lineno}" + (f" of {owner_path}" if owner is not facts else "")
        yield hit(
            facts,
            meeting.pin.node,
            f"{text_of(meeting.pin.node)} runs only after {text_of(meeting.edge.site.node)} "
            f"(line {meeting.edge.site.node.lineno}) started the process group "
            f"(init_process_group at {where})",
            {
                "pin": text_of(meeting.pin.node),
                "related": [related_place(owner_path, init.node, PROCESS_GROUP)],
            },
            severity=Severity.INFO,
        )


def is_gloo(call: CallSite) -> bool:
    backend = call.argument(0, "backend")
    return isinstance(backend, ast.Constant) and backend.value == "gloo"
