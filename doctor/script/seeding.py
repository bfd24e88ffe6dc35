"""Seeding calls judged by DDP122 (same-seed-every-rank): whether a seed has a rank term,
and whether a program seeds alike on purpose to compare two runs."""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import CallSite, ScriptFacts
from ddp_doctor.script.origins import PARAM, SPAWN_INDEX
from ddp_doctor.script.rankflow import mentions_rank


def reseeds_to_compare(seeds: list[CallSite]) -> bool:
    """The same constant seed set again in another function (`train_baseline()` and
    `train_integration()` each start with set_seed(42)): two runs made to draw the same
    numbers, to be compared; the shared stream is the point."""
    by_value: dict[object, set[object]] = {}
    for site in seeds:
        value = site.node.args[0] if site.node.args else site.keyword("seed")
        if isinstance(value, ast.Constant) and site.ctx.function is not None:
            by_value.setdefault(value.value, set()).add(site.ctx.function)
    return any(len(functions) > 1 for functions in by_value.values())


def has_rank_term(facts: ScriptFacts, site: CallSite) -> bool:
    """seed + rank, directly or through a name (`seed_offset = rank; manual_seed(1337 +
    seed_offset)`), or through a helper's parameter (`init_seeds(opt.seed + 1 + RANK)`)."""
    values = [*site.node.args, *(kw.value for kw in site.node.keywords)]
    specific = site.keyword("device_specific")  # accelerate's set_seed adds process_index
    if isinstance(specific, ast.Constant) and specific.value is True:
        return True
    if any(mentions_rank(facts, value) for value in values):
        return True
    flow = facts.project.values
    for value in values:
        for origin in flow.origins(facts, value, site.ctx):
            helper = site.ctx.function
            if (
                origin.kind == PARAM
                and helper is not None
                and origin.node is helper.node
                and not facts.project.graph.callers(helper)
            ):
                return True  # a seeding helper nobody in the tree calls: its callers decide
            if origin.kind == SPAWN_INDEX:
                return True
            if (
                origin.node is not None
                and origin.facts is not None
                and (mentions_rank(origin.facts, origin.node))
            ):
                return True
    return False
