"""Helpers for the rank rules: saves, spans, collective helpers, rank-aware logging set-ups."""

from __future__ import annotations

import ast
import re
from collections import Counter

from ddp_doctor.script import names
from ddp_doctor.script.facts import NONZERO, ZERO, CallSite, Function, ScriptFacts
from ddp_doctor.script.guards import is_main_process_predicate, is_rank_like
from ddp_doctor.script.reaching import element


def contains(outer: ast.AST, inner: ast.AST) -> bool:
    """Whether `inner`'s source span lies within `outer`'s."""
    start = (outer.lineno, outer.col_offset)  # type: ignore[attr-defined]
    end = (outer.end_lineno, outer.end_col_offset)  # type: ignore[attr-defined]
    return start <= (inner.lineno, inner.col_offset) and (  # type: ignore[attr-defined]
        (inner.end_lineno, inner.end_col_offset) <= end  # type: ignore[attr-defined]
    )


def save_calls(facts: ScriptFacts) -> list[CallSite]:
    """torch.save and helpers named like a save: save_checkpoint, save_on_master, xm.save."""
    return [c for c in facts.calls if "save" in c.key.lower()]


_NAME_HOPS = 3  # path = join(d, name); name = f"part_{rank_save}.pkl"; rank_save = get_rank()


def mentions_rank(facts: ScriptFacts, node: ast.AST, hops: int = _NAME_HOPS) -> bool:
    """A path or message built from the rank: f"ckpt_{rank}.pt", os.path.join(d, str(rank)),
    directly or through the names it is built from, a few assignments back."""
    if any(is_rank_like(n) for n in ast.walk(node)):
        return True
    if hops <= 0:
        return False
    for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
        for assignment in facts.assignments_by_target.get(name, ()):
            if assignment.element or assignment.value is None:
                continue
            value = element(assignment.value, assignment.index)  # a, rank = x, get_rank()
            if value is not None and value is not node and mentions_rank(facts, value, hops - 1):
                return True
    return False


_LOG_SETUPS = ("basicConfig", "setLevel", "disable", "dictConfig")
_LOG_CONFIGURATION = frozenset({*_LOG_SETUPS, "fileConfig", "addHandler", "log_to_stderr"})
# A project's own set-up helper (setup_logger, init_logger_dist): trusted to know the rank.
_LOG_HELPER = re.compile(r"(setup|init|config|configure|get_root)_?log", re.I)


def logging_configured_here(facts: ScriptFacts) -> bool:
    """The file sets logging up itself (the standard library's calls); otherwise who prints
    what is decided elsewhere (often per rank: a launcher or an entry script not in view)."""
    return any(facts.calls_by_key.get(key) for key in _LOG_CONFIGURATION)


def logging_is_rank_aware(facts: ScriptFacts) -> bool:
    """logging configured per rank: basicConfig/setLevel/dictConfig under a rank guard or
    with the rank, or by the project's own set-up helper (setup_logger, init_logger_dist)."""
    if any(_LOG_HELPER.search(site.key) for site in facts.calls if "log" in site.key.lower()):
        return True
    for key in _LOG_SETUPS:
        for call in facts.calls_by_key.get(key, ()):
            if call.ctx.guard is not None:
                return True
            values: list[ast.AST] = [*call.node.args, *(kw.value for kw in call.node.keywords)]
            used = {n.id for v in values for n in ast.walk(v) if isinstance(n, ast.Name)}
            for name in used:  # level = INFO if rank == 0 else WARNING; {"level": level}
                values += [a.value for a in facts.assignments_by_target.get(name, ())]
            if any(
                is_rank_like(n) or is_main_process_predicate(n) for v in values for n in ast.walk(v)
            ):
                return True
    return False


def paired_collectives(facts: ScriptFacts) -> set[tuple[Function | None, str | None]]:
    """(function, collective) called under both a rank-0 and a non-rank-0 guard in one function:
    the "first process does the work, the others wait" pattern, where every rank calls it once."""
    sides: dict[tuple[Function | None, str | None], set[str]] = {}
    for call in facts.calls_to(*names.COLLECTIVES):
        if call.ctx.guard is not None:
            key = (call.ctx.function, facts.resolve(call))
            sides.setdefault(key, set()).add(call.ctx.guard.polarity)
    return {key for key, seen in sides.items() if seen >= {ZERO, NONZERO}}


def collective_helpers(facts: ScriptFacts) -> list[tuple[CallSite, str]]:
    """Calls, under a rank guard, of a function of the tree that runs a collective outside any
    rank guard of its own (directly or a few calls down)."""
    graph = facts.project.graph
    reach = graph.reaching("collective", _unguarded_collective, _unguarded)
    found = []
    for site in facts.calls:
        if site.ctx.guard is None or matched_in_other_arm(site):
            continue
        for target in graph.targets(facts, site):
            if target in reach and target is not site.ctx.function:
                found.append((site, _first_collective(graph, target)))
                break
    return found


def matched_in_other_arm(site: CallSite) -> bool:
    """`if rank == src: broadcast(a); broadcast(b)  else: broadcast(a); broadcast(b)`: the
    rank guard is an if/else whose other arm makes as many calls of the same name, so every
    rank joins each collective (the sender in one arm, the receivers in the other)."""
    guard = site.ctx.guard
    node = guard.node if guard is not None else None
    if not isinstance(node, ast.If) or not node.orelse:
        return False
    arms = [_call_names(node.body), _call_names(node.orelse)]
    key = names.last_identifier(site.node.func)
    return key is not None and arms[0][key] == arms[1][key] > 0


def _call_names(statements: list[ast.stmt]) -> Counter[str]:
    found: Counter[str] = Counter()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                name = names.last_identifier(node.func)
                if name:
                    found[name] += 1
    return found


_COLLECTIVE_KEYS = frozenset(name.rsplit(".", 1)[-1] for name in names.COLLECTIVES)


def _unguarded_collective(facts: ScriptFacts, site: CallSite) -> bool:
    return (
        site.ctx.guard is None
        and site.key in _COLLECTIVE_KEYS
        and facts.resolve(site) in names.COLLECTIVES
    )


def _unguarded(facts: ScriptFacts, site: CallSite) -> bool:
    return site.ctx.guard is None


def _first_collective(graph, function: Function) -> str:  # type: ignore[no-untyped-def]
    for facts, site in graph.sites_with(function, "collective", _unguarded_collective, _unguarded):
        if _unguarded_collective(facts, site):
            return f"{names.dotted(site.node.func) or 'a collective'}()"
    return "a collective"
