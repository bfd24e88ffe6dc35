"""Whether a program's process group is a world of one process (DDP114, DDP119).

Evaluation and debugging scripts often start a process group only because the code they reuse
calls collectives or wraps the model in DDP: `init_process_group(..., world_size=1, rank=0)`,
sometimes after refusing to run with more than one GPU (`if device_count() > 1: print(...);
exit()`; VMamba's analyze/eval.py). Such a program is distributed in form, so the rules about
the group itself still judge it (a missing destroy, set_device after the init), but it has one
rank: nothing is printed once per rank, and a DistributedSampler of one replica pads nothing.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.evidence import LAUNCHER_VARIABLES, is_launched
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.region import single_process

_EXITS = frozenset({"exit", "_exit", "quit", "abort"})


def one_process_world(facts: ScriptFacts) -> bool:
    """Every process group this file can start has one process: each init_process_group call
    that can run passes world_size=1 (at least one does), none sits after an unconditional
    exit only, nothing launches the file several times (a launch line, mp.spawn) and nothing
    reads the launcher's per-process variables (RANK, LOCAL_RANK, WORLD_SIZE)."""
    cached = facts.__dict__.get("_one_process_world")
    if cached is None:
        cached = facts.__dict__["_one_process_world"] = _one_process_world(facts)
    return cached


def _one_process_world(facts: ScriptFacts) -> bool:
    if facts.tree is None or LAUNCHER_VARIABLES & facts.env_names(writes=False):
        return False
    inits = facts.calls_to(names.INIT_PROCESS_GROUP)
    if not inits or not any(single_process(site) for site in inits):
        return False  # no world of one asked for: the common case, decided without a walk
    if facts.calls_to(*names.SPAWN) or is_launched(facts):
        return False
    dead = dead_lines(facts.tree)
    live = [site for site in inits if site.node.lineno not in dead]
    return bool(live) and all(single_process(site) for site in live)


def dead_lines(tree: ast.Module) -> frozenset[int]:
    """Lines of the statements that follow, in the same block, a `raise` or a call of exit():
    code that never runs."""
    found: set[int] = set()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                found.update(_after_stop(block))
    return frozenset(found)


def _after_stop(block: list[ast.stmt]) -> set[int]:
    for index, statement in enumerate(block):
        if _stops(statement):
            return {
                line
                for later in block[index + 1 :]
                for line in range(later.lineno, (later.end_lineno or later.lineno) + 1)
            }
    return set()


def _stops(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Raise):
        return True
    call = statement.value if isinstance(statement, ast.Expr) else None
    return isinstance(call, ast.Call) and names.last_identifier(call.func) in _EXITS
