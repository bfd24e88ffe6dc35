"""Seeding calls judged by DDP122 (same-seed-every-rank): whether a seed has a rank term,
and whether a program seeds alike on purpose to compare two runs."""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.callsources import comes_from_call
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, Function, ScriptFacts, position
from ddp_doctor.script.origins import PARAM, SPAWN_INDEX
from ddp_doctor.script.purpose import DATA_SPLITS
from ddp_doctor.script.rankflow import mentions_rank
from ddp_doctor.script.unseenseeders import unseen_seeding_calls


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


def has_rank_term(facts: ScriptFacts, site: CallSite, callers_decide: bool = True) -> bool:
    """seed + rank, directly or through a name (`seed_offset = rank; manual_seed(1337 +
    seed_offset)`), or through a helper's parameter (`init_seeds(opt.seed + 1 + RANK)`); a
    helper nobody in the tree calls counts as apart only where `callers_decide`."""
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
            ):  # a seeding helper nobody in the tree calls: its callers decide, if any
                return callers_decide
            if origin.kind == SPAWN_INDEX:
                return True
            if origin.kind == PARAM:
                continue  # its node is the whole function, whose body may name the rank
            known = origin.node is not None and origin.facts is not None
            if known and mentions_rank(origin.facts, origin.node):  # type: ignore[arg-type]
                return True
    return False


# Seeding calls of the CUDA generators alone: the data's draws (crops, flips, masks, shuffles)
# come from the CPU generators, so these do not correlate the augmentation DDP122 is about.
CUDA_ONLY_SEEDERS = frozenset({"torch.cuda.manual_seed", "torch.cuda.manual_seed_all"})


def seeds_data(facts: ScriptFacts, site: CallSite) -> bool:
    """A seeding call of the text's list (torch.manual_seed, random.seed, np.random.seed,
    set_seed, seed_everything), not of the CUDA generators only (hifi-gan's worker calls
    only `torch.cuda.manual_seed(h.seed)`)."""
    return facts.resolve(site) not in CUDA_ONLY_SEEDERS


# The process's own seed: in a DataLoader worker, torch.initial_seed() is the loader's base seed
# plus the worker id (the documented worker_init_fn idiom reseeds numpy and random from it).
_SEED_HOPS = 2


def reseeds_from_own_seed(facts: ScriptFacts, site: CallSite) -> bool:
    """`worker_seed = torch.initial_seed() % 2**32; np.random.seed(worker_seed)`: the seed is
    the one this process (or loader worker) already holds, so no shared constant comes in;
    whether it differs per rank is decided where that seed was set, judged there."""
    values = [*site.node.args, *(kw.value for kw in site.node.keywords)]
    return bool(values) and all(
        comes_from_call(facts, value, _SEED_HOPS, _is_own_seed_call) for value in values
    )


def _is_own_seed_call(facts: ScriptFacts, call: ast.Call) -> bool:
    """torch.initial_seed(), torch.random.initial_seed(), torch.cuda.initial_seed()."""
    if names.last_identifier(call.func) != "initial_seed":
        return False
    qualified = facts.qualname(call.func) or names.dotted(call.func) or ""
    return qualified.startswith("torch.")


def seeds_a_generator_per_rank(facts: ScriptFacts) -> bool:
    """`g = torch.Generator(); g.manual_seed(seed + rank)`: the program draws its per-rank
    randomness from a generator of its own, seeded with the rank; the global seed it sets
    beside it is the shared one on purpose (the model's initialisation). Only a generator
    that draws for training counts: one passed (`generator=g`) outside `torch.no_grad()` /
    `inference_mode()`. build-nanogpt's `sample_rng.manual_seed(42 + ddp_rank)` feeds only
    the multinomial of its text samples, under no_grad: the training data still draws from
    the global generator seeded alike on every rank."""
    return any(
        facts.resolve(site) not in names.SEEDERS
        and has_rank_term(facts, site)
        and _draws_for_training(facts, site)
        for site in facts.methods_called("manual_seed")
        if site.node.args or site.node.keywords
    )


def _generator_names(facts: ScriptFacts, site: CallSite) -> set[str]:
    """`g` of `g.manual_seed(...)`, and the name a chained `torch.Generator().manual_seed(...)`
    is assigned to."""
    found: set[str] = set()
    if isinstance(site.receiver, ast.Name):
        found.add(site.receiver.id)
    target = facts.assigned_to(site.node)
    if target is not None:
        found.add(target)
    return found


def _draws_for_training(facts: ScriptFacts, site: CallSite) -> bool:
    generators = _generator_names(facts, site)
    for call in facts.calls:
        value = call.keyword("generator")
        if value is None or call.ctx.no_grad:
            continue
        if value is site.node or (isinstance(value, ast.Name) and value.id in generators):
            return True
    return False


# Calls that shard a model: FSDP1, FSDP2, and the strategies of Lightning that run them.
_SHARDING_KEYS = (
    "FullyShardedDataParallel",
    "fully_shard",
    "ModelParallelStrategy",
    "FSDPStrategy",
)


def shards_a_meta_model(facts: ScriptFacts) -> bool:
    """A model built on the meta device (`with torch.device("meta"):`, `device="meta"`)
    in a program that shards it: nothing broadcasts rank 0's weights, each rank initialises
    its own shard after the wrap, and the sharded init (DTensor's RNG tracker, pytorch/pytorch
    torch/distributed/tensor/_random.py) needs the same seed on every rank to make the shards
    one model (Lightning's Fabric fp8 and FSDP2 examples seed alike for that)."""
    mates = program_files(facts)
    if not any(mate.calls_by_key.get(key) for mate in mates for key in _SHARDING_KEYS):
        return False
    return any(_builds_on_meta(mate) for mate in mates)


def _builds_on_meta(facts: ScriptFacts) -> bool:
    for site in facts.calls:
        if site.key == "device" and _is_meta(site.node.args[0] if site.node.args else None):
            return True  # torch.device("meta"), as a context manager or a value
        if _is_meta(site.keyword("device")):
            return True
    return False


def _is_meta(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "meta"


_SUBGROUPS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration")


def builds_tensor_parallel_groups(facts: ScriptFacts) -> bool:
    """Tensor parallelism made by hand (Megatron, picotron): the program creates process
    subgroups and keeps one under a tensor-parallel name (`self.tp_group =
    dist.new_subgroups_by_enumeration(...)[0]`, `_TENSOR_MODEL_PARALLEL_GROUP = group`); the
    ranks of such a group hold shards of one layer and must draw the same numbers."""
    files = [f for f in program_files(facts) if f.is_python and f.tree is not None]
    if not any(f.calls_by_key.get(key) for f in files for key in _SUBGROUPS):
        return False
    return any(
        _tensor_parallel_name(target)
        for f in files
        for node in ast.walk(f.tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
    )


def _tensor_parallel_name(target: ast.expr) -> bool:
    """tp_group, tensor_parallel_group, _TENSOR_MODEL_PARALLEL_GROUP, model_parallel_group."""
    if not isinstance(target, (ast.Name, ast.Attribute)):
        return False
    words = set((names.last_identifier(target) or "").lower().strip("_").split("_"))
    return "group" in words and bool(words & {"tp", "tensor"} or {"model", "parallel"} <= words)


def delegates_seed(facts: ScriptFacts, site: CallSite) -> bool:
    """`def set_seed(seed): torch.manual_seed(seed)`, called from elsewhere in the tree: the
    seed is the helper's parameter, so whether it holds a rank term is decided at the
    helper's calls (`set_seed(args.seed)` or `set_seed(args.seed + rank)`), judged there."""
    helper = site.ctx.function
    if helper is None:
        return False
    if not any(_names_a_parameter(value, set(helper.params)) for value in _seed_values(site)):
        return False
    if not any(not edge.handed for edge in facts.project.graph.callers(helper)):
        return False  # handed on (`launch(main, ...)`), or called by nothing: judged here
    return is_seeding_helper(facts, helper)


def _names_a_parameter(value: ast.expr, params: set[str]) -> bool:
    """`seed`, `seed + 1`: the parameter itself. `args.seed` is not: a helper handed the whole
    configuration picks the seed itself, and is judged where it seeds."""
    bases = {
        id(node.value)
        for node in ast.walk(value)
        if isinstance(node, (ast.Attribute, ast.Subscript))
    }
    return any(
        isinstance(node, ast.Name) and node.id in params and id(node) not in bases
        for node in ast.walk(value)
    )


def _seeding_helpers(facts: ScriptFacts) -> set[Function]:
    """The file's functions that seed the data's generators with their own parameter, for
    their callers to judge (computed once per file)."""
    cached = facts.__dict__.get("_seeding_helpers")
    if cached is None:
        cached = facts.__dict__["_seeding_helpers"] = {
            site.ctx.function
            for site in facts.calls_to(*names.SEEDERS)
            if site.ctx.function is not None
            and seeds_data(facts, site)
            and delegates_seed(facts, site)
        }
    return cached


def is_seeding_helper(facts: ScriptFacts, function: Function) -> bool:
    """A function whose work is seeding: at least half its calls seed (torchdistill's
    set_seed, insightface's setup_seed, YOLOv5's init_seeds), not a training function
    that seeds on its way (`def train(rank, seed): torch.manual_seed(seed); ...`)."""
    calls = [site for site in facts.calls if site.ctx.function is function]
    seeding = sum(1 for site in calls if facts.resolve(site) in names.SEEDERS)
    return 2 * seeding >= len(calls)


def seeding_helper_calls(facts: ScriptFacts) -> list[CallSite]:
    """This file's calls of the tree's seeding helpers (functions that seed the data's
    generators with their own parameter): torchdistill's `set_seed(args.seed)`, whose body
    in common/main_util.py seeds random, numpy and torch with `seed`; and of seeding helpers
    defined out of view (PixArt's `set_random_seed(config.seed)`: unseenseeders.py)."""
    helpers = {helper for mate in program_files(facts) for helper in _seeding_helpers(mate)}
    graph = facts.project.graph
    found = [
        site
        for key in {helper.name for helper in helpers}
        for site in facts.calls_by_key.get(key, ())
        if any(target in helpers for target in graph.targets(facts, site))
    ]
    return sorted([*found, *unseen_seeding_calls(facts)], key=position)


# A DataLoader worker's init function: mmcv's, BasicSR's and insightface's
# `worker_init_fn(worker_id, num_workers, rank, seed)` seed each worker with
# num_workers * rank + worker_id + seed.
_WORKER_ID_PARAMS = frozenset({"worker_id", "worker_idx", "wid"})


def seeds_workers_per_rank(facts: ScriptFacts) -> bool:
    """The program defines a DataLoader worker init function (named worker_init*, or taking
    `worker_id` first) that seeds with the rank: the data's random draws (crops, flips) run
    in the loader workers, reseeded per rank, whatever the main process seeded alike. A
    function passed as `worker_init_fn=` through functools.partial is often built where the
    checked tree cannot see it, so its definition is the evidence. Its seeding may go
    through a helper (`set_random_seed(num_workers * rank + worker_id + seed)`)."""
    return any(
        _is_worker_init(site.ctx.function)
        and any(mentions_rank(mate, value) for value in _seed_values(site))
        for mate in program_files(facts)
        for site in [*mate.calls_to(*names.SEEDERS), *seeding_helper_calls(mate)]
    )


def _seed_values(site: CallSite) -> list[ast.expr]:
    return [*site.node.args, *(kw.value for kw in site.node.keywords)]


def seeding_calls(facts: ScriptFacts) -> list[CallSite]:
    """The file's seeding calls DDP122 judges: the seeders' own (those of a seeding helper
    the tree calls are judged at its calls instead) and the calls of the tree's seeding
    helpers."""
    own = [site for site in facts.calls_to(*names.SEEDERS) if not delegates_seed(facts, site)]
    return sorted([*own, *seeding_helper_calls(facts)], key=position)


def _is_worker_init(function: Function | None) -> bool:
    if function is None:
        return False
    first = function.params[0] if function.params else ""
    return "worker_init" in function.name.lower() or first in _WORKER_ID_PARAMS


def other_draws_decide(facts: ScriptFacts) -> bool:
    """The program's per-rank randomness comes from elsewhere (a generator of its own seeded
    with the rank, loader workers reseeded per rank), or the shared seed is what makes the
    shards of one model agree (a meta-built model sharded, tensor-parallel groups built by
    hand: parallelize_module's work)."""
    return (
        seeds_a_generator_per_rank(facts)
        or seeds_workers_per_rank(facts)
        or shards_a_meta_model(facts)
        or builds_tensor_parallel_groups(facts)
    )


def seed_value(site: CallSite) -> ast.expr | None:
    """The seed a call passes: its first argument, its `seed=`, or a helper's only keyword
    (`fix_random(random_seed=cfg.seed)`)."""
    if site.node.args:
        return site.node.args[0]
    given = site.keyword("seed")
    if given is None and site.node.keywords:
        return site.node.keywords[0].value
    return given


# How far down the calls after a seed a data split is looked for (training_loop seeds, then
# calls get_dataloaders, which draws the split).
_SPLIT_HOPS = 2


def splits_data_below(facts: ScriptFacts, seed: CallSite) -> bool:
    """The seeding function then calls, outside any loop of its own, a function of the tree
    that draws a split and picks the data with it (`random_perm = np.random.permutation(n)`,
    `random_perm[:cut]`; `random_split(...)`): accelerate's notebook seeds in training_loop
    and splits in get_dataloaders, and every process must cut the same split. A draw in a
    per-step helper (called in a loop) is augmentation, not a split."""
    later = [
        site
        for site in facts.calls
        if site.ctx.function is seed.ctx.function
        and position(site) > position(seed)
        and len(site.ctx.loops) == len(seed.ctx.loops)
    ]
    return _reaches_a_split(facts, later, _SPLIT_HOPS, set())


def _reaches_a_split(
    facts: ScriptFacts, sites: list[CallSite], hops: int, seen: set[Function]
) -> bool:
    if hops <= 0:
        return False
    for site in sites:
        for target in facts.project.graph.targets(facts, site):
            if target in seen:
                continue
            seen.add(target)
            owner = facts.project.owner(target)
            top = [s for s in owner.calls if s.ctx.function is target and not s.ctx.loops]
            if any(_picks_a_split(owner, s) for s in top if owner.resolve(s) in DATA_SPLITS):
                return True
            if _reaches_a_split(owner, top, hops - 1, seen):
                return True
    return False


# Draws that return the parts themselves; the others return an order the data is cut with.
_SPLITTERS = ("torch.utils.data.random_split", "sklearn.model_selection.train_test_split")


def _picks_a_split(facts: ScriptFacts, draw: CallSite) -> bool:
    """The draw's result cuts the data: random_split's parts, or an order that is sliced in
    the same function (`order[:cut]`; `random.shuffle(files)` then `files[cut:]`)."""
    if facts.resolve(draw) in _SPLITTERS:
        return True
    picked = {facts.assigned_to(draw.node)}
    if draw.key == "shuffle" and draw.node.args:
        picked.add(names.dotted(draw.node.args[0]))
    function = draw.ctx.function
    body = function.node if function is not None else facts.tree
    return any(
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Slice)
        and (node.value is draw.node or names.dotted(node.value) in picked - {None})
        for node in ast.walk(body)
    )
