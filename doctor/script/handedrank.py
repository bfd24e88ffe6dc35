"""An argparse --local_rank handed by an entry point to a helper of another file that pins the
GPU with it (DDP104): OpenPCDet's `getattr(common_utils, 'init_dist_%s' % args.launcher)(
args.tcp_port, args.local_rank)`, whose `init_dist_pytorch(tcp_port, local_rank)` runs
`torch.cuda.set_device(local_rank % num_gpus)`. The mistake is the entry point's (the helper
places whatever it is given), so the entry point's call reports it, the helper's line related.
"""

from __future__ import annotations

from typing import NamedTuple

from ddp_doctor.script.callgraph import DEPTH
from ddp_doctor.script.facts import CallSite, Function, ScriptFacts
from ddp_doctor.script.hits import PLACEMENT, related_place
from ddp_doctor.script.localrank import PLACING_KEYS, local_rank_from_env
from ddp_doctor.script.origins import OPTION, Origin
from ddp_doctor.script.placement import device_sources
from ddp_doctor.script.values import Values


class Handed(NamedTuple):
    call: CallSite  # the entry point's call that hands the option over
    helper: ScriptFacts  # the file of the placement
    placement: CallSite


def handed_to_helpers(facts: ScriptFacts, values: Values) -> list[Handed]:
    """The calls of this file that hand its --local_rank option to a function of another
    file, with the placements there (a few calls down) whose GPU is that option (computed
    once per file)."""
    cached = facts.__dict__.get("_local_rank_handed")
    if cached is None:
        cached = facts.__dict__["_local_rank_handed"] = list(_handed(facts, values))
    return cached


def _handed(facts: ScriptFacts, values: Values) -> list[Handed]:
    project = facts.project
    graph = project.graph
    found: list[Handed] = []
    for site in facts.calls:
        helpers = [t for t in graph.targets(facts, site) if project.owner(t) is not facts]
        if not helpers or not _hands_option(facts, values, site):
            continue
        reached = graph.closure(helpers, up=False, depth=DEPTH)
        for placement, helper in _placements_in(project, reached):
            if helper is facts or local_rank_from_env(helper):
                continue  # the helper reads LOCAL_RANK itself (mmcv's init_dist shape)
            if _from_option_of(facts, values, placement, helper):
                found.append(Handed(site, helper, placement))
    return found


def _hands_option(facts: ScriptFacts, values: Values, site: CallSite) -> bool:
    arguments = [*site.node.args, *(kw.value for kw in site.node.keywords)]
    return any(
        _option_of(facts, origin)
        for argument in arguments
        for origin in values.origins(facts, argument, site.ctx)
    )


def _placements_in(project, reached: set[Function]) -> list[tuple[CallSite, ScriptFacts]]:  # type: ignore[no-untyped-def]
    found: list[tuple[CallSite, ScriptFacts]] = []
    for function in reached:
        owner = project.owner(function)
        for key in PLACING_KEYS:
            found += [
                (c, owner) for c in owner.calls_by_key.get(key, ()) if c.ctx.function is function
            ]
    return found


def _from_option_of(
    facts: ScriptFacts, values: Values, placement: CallSite, helper: ScriptFacts
) -> bool:
    arguments = [*placement.node.args, *(kw.value for kw in placement.node.keywords)]
    return any(
        _option_of(facts, origin)
        for argument in arguments
        for origin in device_sources(helper, values, argument, placement.ctx)
    )


def _option_of(facts: ScriptFacts, origin: Origin) -> bool:
    return origin.kind == OPTION and origin.name == "local_rank" and origin.facts is facts


def option_owners(facts: ScriptFacts, values: Values, placement: CallSite) -> list[ScriptFacts]:
    """The other files whose --local_rank option a placement of this file takes its GPU from."""
    arguments = [*placement.node.args, *(kw.value for kw in placement.node.keywords)]
    owners = {
        id(origin.facts): origin.facts
        for argument in arguments
        for origin in device_sources(facts, values, argument, placement.ctx)
        if origin.kind == OPTION and origin.name == "local_rank"
    }
    return [owner for owner in owners.values() if owner is not None and owner is not facts]


def placement_place(handed: Handed, path: str) -> dict[str, object]:
    """The helper's placement as a related place (its path spelled as given)."""
    return related_place(path, handed.placement.node, PLACEMENT)
