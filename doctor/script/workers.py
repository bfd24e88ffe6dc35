"""Which code runs in the processes a script starts itself (mp.spawn, a Process, a library
launch helper): module code outside the main guard and the functions handed to the starter.
A thread is no process: it shares the parent's seeded generators."""

from __future__ import annotations

from ddp_doctor.script.facts import CallSite, Function, ScriptFacts


def spawned_code(facts: ScriptFacts) -> set[Function] | None:
    """Functions that run in processes this script spawns; None when it spawns none. A thread
    (threading.Thread(target=...)) is no new process: it shares the seeded generators."""
    graph = facts.project.graph
    started = {
        edge.callee
        for unit in {graph.unit(facts, site.ctx) for site in facts.calls}
        for edge in graph.callees(unit)
        if edge.spawned and edge.facts is facts and not _starts_a_thread(facts, edge.site)
    }
    return graph.closure(started, up=False) if started else None


def _starts_a_thread(facts: ScriptFacts, site: CallSite) -> bool:
    qualified = facts.resolve(site) or ""
    return site.key == "Thread" or qualified.startswith("threading.")


def in_worker(site: CallSite, workers: set[Function]) -> bool:
    """Module code outside the main guard runs again in every spawned worker."""
    if site.ctx.function is None:
        return not site.ctx.main_guard
    return site.ctx.function in workers
