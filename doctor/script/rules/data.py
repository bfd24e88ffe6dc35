"""Rules about feeding data to the ranks: samplers, shuffling, set_epoch, evaluation, seeds."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.evalloaders import eval_loaders_from_factories
from ddp_doctor.script.facts import CallSite, ScriptFacts, text_of
from ddp_doctor.script.flow import candidates, flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.kinds import uses_tensor_parallel
from ddp_doctor.script.purpose import (
    is_test_file,
    shards_a_shared_draw,
    splits_data_after,
    trains,
    weights_never_broadcast,
)
from ddp_doctor.script.samplerchecks import never_shuffled, truncates_to_dataset
from ddp_doctor.script.samplers import SamplerFlow, SamplerUse, looks_like_eval
from ddp_doctor.script.seeding import (
    has_rank_term,
    other_draws_decide,
    reseeds_from_own_seed,
    reseeds_to_compare,
    seed_value,
    seeding_calls,
    seeds_data,
    splits_data_below,
)
from ddp_doctor.script.workers import in_worker, spawned_code


def _samplers(facts: ScriptFacts) -> SamplerFlow:
    cached = facts.__dict__.get("_samplers")
    if cached is None:
        cached = facts.__dict__["_samplers"] = SamplerFlow(facts)
    return cached


@rule(
    "DDP111",
    Remediation(
        "Give the training DataLoader sampler=DistributedSampler(dataset) (and shuffle=False "
        "on the loader)."
    ),
)
def distributed_sampler_missing(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        In a script that wraps a model in DDP, a DataLoader that looks like the training one
        (shuffle=True, or a name with "train") and has neither sampler= nor batch_sampler=.
        A loader in the other arm of an `if` whose first arm builds a DistributedSampler (DGL's
        `if n_gpus > 1: ... else: DataLoader(..., shuffle=True)`) is the one-process path.
    Why it matters:
        Without a DistributedSampler each rank iterates the whole dataset. An "epoch" then
        shows every sample world_size times, silently: the run is slower per epoch and the
        learning-rate schedule and epoch counts mean something else than intended.
    Example:
        model = DDP(model, device_ids=[local_rank])
        train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    Fix:
        sampler = DistributedSampler(train_set)
        train_loader = DataLoader(train_set, batch_size=32, sampler=sampler)
    """
    flow = flow_of(facts)
    if not flow.ddp_wraps:
        return
    for loader in _samplers(facts).loaders:
        if loader.argument(2, "sampler") is not None or loader.keyword("batch_sampler"):
            continue
        target = flow.target_of(loader.node)
        if not flow.in_distributed_region(loader.ctx) or _handed_on(facts, target):
            continue
        if any(use.site.ctx.excludes(loader.ctx) for use in _samplers(facts).uses):
            continue  # `if n_gpus > 1: DistributedSampler ... else: DataLoader(shuffle=True)`
        dataset = loader.argument(0, "dataset")
        dataset_text = names.dotted(dataset) if dataset is not None else None
        shuffle = loader.argument(3, "shuffle")
        shuffled = isinstance(shuffle, ast.Constant) and shuffle.value is True
        named_train = any("train" in (t or "").lower() for t in (target, dataset_text))
        if (shuffled or named_train) and not looks_like_eval(target, dataset_text):
            yield hit(
                facts,
                loader.node,
                f"DataLoader {target or text_of(dataset)} has no DistributedSampler: every rank "
                "iterates the whole dataset",
                {"loader": target or "", "dataset": dataset_text or ""},
            )


@rule(
    "DDP112",
    Remediation("Drop shuffle=True from the DataLoader; DistributedSampler shuffles itself."),
)
def sampler_shuffle_conflict(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        DataLoader(..., shuffle=True, sampler=...) or with batch_sampler=..., where the sampler
        is not the literal None.
    Why it matters:
        DataLoader raises "sampler option is mutually exclusive with shuffle" as soon as the
        sampler is not None, so the distributed path of the script crashes at start-up.
    Example:
        loader = DataLoader(ds, shuffle=True, sampler=DistributedSampler(ds))
    Fix:
        loader = DataLoader(ds, sampler=DistributedSampler(ds, shuffle=True))
    """
    for loader in _samplers(facts).loaders:
        shuffle = loader.argument(3, "shuffle")
        if not (isinstance(shuffle, ast.Constant) and shuffle.value is True):
            continue
        sampler = loader.argument(2, "sampler") or loader.keyword("batch_sampler")
        if sampler is None or all(_is_none(c) for c in candidates(sampler)):
            continue
        yield hit(
            facts,
            shuffle,
            f"shuffle=True together with sampler {text_of(sampler)}: DataLoader raises "
            "'sampler option is mutually exclusive with shuffle'",
            {"sampler": text_of(sampler)},
        )


def _handed_on(facts: ScriptFacts, loader: str | None, library_only: bool = False) -> bool:
    """`loader = accelerator.prepare(loader)`, `make_private(data_loader=loader)`: a library
    replaces the loader (and shards it) before use (with `library_only`, not a function of
    the tree: `loader = sample_data(loader)` that yields its batches forever is still it)."""
    if loader is None:
        return False
    for assignment in facts.assignments_by_target.get(loader, ()):
        value = assignment.value
        if not isinstance(value, ast.Call):
            continue
        passed = [*value.args, *(kw.value for kw in value.keywords)]
        if not any(names.dotted(p) == loader for p in passed):
            continue
        if not library_only or facts.project.definition(facts, value.func, assignment.ctx) is None:
            return True
    return False


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


@rule(
    "DDP113",
    Remediation("Call sampler.set_epoch(epoch) at the top of every epoch, before iterating."),
)
def set_epoch_missing(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        A DistributedSampler (shuffle not False, not an evaluation sampler) whose loader is
        iterated once per epoch of an outer loop (or, when no loop over it is in view, in a
        script that runs its own training loop: a backward() in a loop or a function; one at
        the top of a notebook of snippets is a single step), with no set_epoch reaching it: not on the
        sampler, not through loader.sampler, not on `self.sampler` in another method, not in
        a function or module of the tree the epoch loop calls. Also set_epoch with a constant
        argument where the loader is iterated per epoch or the call repeats (not `set_epoch(0)`
        once before one pass: peft's EVA init), and set_epoch called once before the epoch loop.
        A single pass over the data needs no set_epoch: nor does a loader that nothing iterates
        (a training loader an evaluation script builds and never reads), one iterated only
        under an evaluation name (`test_loader = subset_loader(...)`, then `for batch in
        test_loader` once per seed), or a sampler built in a helper from a `shuffle`
        parameter that every call path reaching its arm sets to False (`elif type ==
        SamplerType.DISTRIBUTED: return DistributedSampler(ds, shuffle=shuffle)`, chosen only
        by evaluation loaders that pass shuffle=False), or a sampler built inside the epoch
        loop with a seed from the loop variable (`DistributedSampler(ds, seed=seed + epoch)`:
        a new order each epoch). A loader handed to a library call that
        replaces it (`model, opt, crit, loader = privacy_engine.make_private(...,
        data_loader=loader)`) is that library's: its sampler is not the one iterated. A
        helper's loader factory checked alone, with no importer in view, is not judged: the
        loop and the set_epoch belong to its caller, out of view (a folder check judges it).
    Why it matters:
        DistributedSampler seeds its shuffle with seed + epoch. Without set_epoch every epoch
        replays the first epoch's order on every rank, silently: worse convergence that no
        error ever points at.
    Example:
        sampler = DistributedSampler(train_set)
        loader = DataLoader(train_set, sampler=sampler)
        for epoch in range(epochs):
            for batch in loader:
                ...
    Fix:
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for batch in loader:
                ...
    """
    flow = _samplers(facts)
    reported_calls: set[int] = set()
    for use in flow.uses:
        if not use.shuffles or flow.for_eval(use) or never_shuffled(facts, use.site):
            continue
        if use.seeded_per_epoch:
            continue  # rebuilt every epoch with seed + epoch: what set_epoch would do
        held = use.loader_names | use.returned_to
        if held and all(_handed_on(facts, name, library_only=True) for name in held):
            continue  # loader = make_private(data_loader=loader): a library's loader is iterated
        epochs = flow.runs_epochs(use)
        if epochs is False or (epochs is None and not flow.has_manual_training_loop):
            continue
        calls = flow.set_epoch_for(use)
        if not calls:
            yield _missing(facts, use)
            continue
        for call in calls:
            if not any(c is call for c in facts.calls_by_key.get("set_epoch", ())):
                continue  # in another file: judged there
            problem = _misplaced(facts, call, epochs is True)
            if problem and id(call) not in reported_calls:
                reported_calls.add(id(call))
                yield hit(facts, call.node, problem, {"call": text_of(call.node)})


def _missing(facts: ScriptFacts, use: SamplerUse) -> Hit:
    sampler = ", ".join(sorted(use.names)) or "DistributedSampler(...)"
    loaders = ", ".join(sorted(use.loader_names | use.returned_to))
    via = f" (feeding {loaders})" if loaders else ""
    return hit(
        facts,
        use.site.node,
        f"{sampler}{via} never gets set_epoch(epoch): every epoch repeats the same order",
        {"sampler": sampler, "loader": loaders},
    )


def _misplaced(facts: ScriptFacts, call: CallSite, per_epoch: bool) -> str | None:
    argument = call.node.args[0] if call.node.args else call.keyword("epoch")
    if isinstance(argument, ast.Constant):
        repeated = bool(call.ctx.loops) or flow_of(facts).called_in_loop(call.ctx.function)
        if not (per_epoch or repeated):  # per_epoch: its loader is iterated once per epoch
            return None  # set_epoch(0) once before one pass (peft's EVA initialisation)
        return f"set_epoch({argument.value!r}) passes a constant: every epoch uses the same order"
    if call.ctx.loops or argument is None:
        return None
    function = call.ctx.function
    used = {n.id for n in ast.walk(argument) if isinstance(n, ast.Name)}
    if function is not None and (
        used & set(function.params) or flow_of(facts).called_in_loop(function)
    ):
        return None
    if not isinstance(argument, ast.Name):
        return None  # self.epoch, state["epoch"]: kept by the object, changes per epoch
    later_loops = [
        loop
        for loop in facts.loops
        if loop.node.lineno > call.node.lineno and _same_scope(loop.node, call, facts)
    ]
    if later_loops:
        return (
            f"{text_of(call.node)} runs once, before the epoch loop at line "
            f"{later_loops[0].node.lineno}: move it into the loop"
        )
    return None


def _same_scope(loop: ast.AST, call: CallSite, facts: ScriptFacts) -> bool:
    function = call.ctx.function
    if function is None:
        return all(
            not (f.node.lineno <= loop.lineno <= (f.node.end_lineno or 0)) for f in facts.functions
        )
    return function.node.lineno <= loop.lineno <= (function.node.end_lineno or 0)


@rule(
    "DDP114",
    Remediation(
        "Evaluate on rank 0 only, or all_reduce counts and sums and drop the padded samples "
        "(len(dataset) is the true total)."
    ),
)
def distributed_sampler_for_eval(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        A DistributedSampler whose name, dataset or DataLoader is named for evaluation
        (val, valid, test, eval), or whose loader a helper returns and every loop of the tree
        iterates under such a name (`test_loader = prepare_samples(...)`; `for batch in
        test_loader`), unless it is built with drop_last=True (which does not pad) or the
        file cuts the gathered results back to the dataset's length (`merged[:
        len(val_set)]`, `[: len(loader.dataset)]`, `nested_truncate(...)`). The tree's own
        samplers of the family count: a class named ...DistributedSampler, or subclassing
        torch's, whose __iter__ pads (uses a total_size, `indices += indices[...]`) or is
        torch's; one that only slices `indices[rank::world]` does not pad.
        Also a call, in an evaluation context (`valid_loader = setup_loader(valid_set)`, a
        `val_dataloader()` method, a `split=cfg.TEST.SPLIT` argument), of a loader factory of
        the tree that builds a padding DistributedSampler (torch's or the tree's own) a few
        calls down and returns the loader or the sampler (`val_sampler =
        make_data_sampler(val_set, False, distributed)`, also star-imported), or a list it
        fills with loaders (`data_loaders.append(data_loader)`; `return data_loaders`,
        `return data_loaders[0]`: maskrcnn-benchmark's make_data_loader); and a call of a
        factory that builds one padding sampler per dataset from a list of shuffle flags
        (`create_sampler(datasets, [True, False], ...)`, the False ones being evaluation
        samplers), unless the program drops the duplicates from its results
        (`remove_duplicate=...`). A converter that rebuilds the training and the evaluation
        loader alike, each in place on an object, for a shared loop (`self.dls.train =
        wrap(self.dls.train)`, the same for `.valid`; `for batch in self.dl`), is judged
        only where a loop of the program iterates under an evaluation name (a factory
        given the datasets, `self.test_loader = prepare(test_set)`, is judged as above).
    Why it matters:
        DistributedSampler pads the dataset with repeated samples so that it divides evenly
        by world_size. Averaged metrics then count some samples twice, silently.
    Example:
        val_sampler = DistributedSampler(val_set, shuffle=False)
    Fix:
        Evaluate on rank 0 with a plain DataLoader, or all_reduce correct and total counts and
        truncate to len(val_set).
    """
    samplers = _samplers(facts)
    for use in samplers.padding_uses:
        if samplers.for_eval(use) and not use.drops_last and not truncates_to_dataset(facts, use):
            name = ", ".join(sorted(use.names)) or text_of(use.site.node)
            yield hit(
                facts,
                use.site.node,
                f"{name} splits evaluation data with padding: metrics count some samples twice",
                {"sampler": name},
                cause="evaluation sampler",
            )
    yield from eval_loaders_from_factories(facts)


@rule(
    "DDP122",
    Remediation("Seed data randomness with seed + rank (keep the model seed shared if needed)."),
)
def same_seed_every_rank(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        In a one-process-per-GPU script (an accelerate Accelerator program counts), seeding
        calls (torch.manual_seed, random.seed, np.random.seed, set_seed, seed_everything)
        whose seed has no rank term, when no seeding call in the script uses the rank
        (accelerate's `set_seed(s, device_specific=True)` adds the process index; a
        torch.cuda.manual_seed(_all) with the rank counts, one without it is not reported:
        the CUDA generators alone draw no augmentation). A reseed from the process's own
        seed (`np.random.seed(torch.initial_seed() % 2**32)` in a worker_init_fn) brings
        no shared value in and is not reported; nor is a program that seeds a generator of
        its own with the rank and draws training data from it (`g.manual_seed(seed + rank)`,
        then `generator=g` outside torch.no_grad: its data draws are per rank; a generator
        that only samples text or images under no_grad does not count). Programs that
        build the model on the meta device and shard it (FSDP, fully_shard, Lightning's
        ModelParallelStrategy) are left alone: each rank initialises its own shard, nothing
        is broadcast, and the shared seed makes the shards one model. Module-level seeding counts: spawned
        workers import the script again and run it; seeding only in the parent before
        mp.spawn does not (the workers start afresh; a thread is no worker: it shares them). Tests are left alone (a gradient
        comparison needs the same data on every rank), so are seeds that a data split drawn
        after them in the same function needs (np.random.permutation, random_split: every
        rank must cut the same split; also one drawn by a function called next, outside
        loops, up to two calls down, whose result cuts the data: `order[:cut]`, as
        accelerate's notebook seeds in training_loop and splits in get_dataloaders), and so are programs whose own sampler shards a draw
        from the global generator by rank (each rank shuffles all indices and keeps its
        share; a project sampler named for distributed use that is not in the checked tree
        may, and is not judged), and so are tensor-parallel programs
        (parallelize_module, distribute_tensor, accelerate's ParallelismConfig(tp_size=...),
        or process subgroups kept under a tensor-parallel name, `self.tp_group =
        dist.new_group(...)`, `_TENSOR_MODEL_PARALLEL_GROUP = group`, as Megatron and
        picotron build them: the ranks of a group must draw the same numbers). Programs that start the process group themselves and never wrap, shard or
        broadcast the model (their own gradient all-reduce, as nanochat's optimizer) are left
        alone: there the shared seed is what gives every rank the same initial weights (a
        model built out of view that the program unwraps, `hasattr(model, "module")` or
        `model.module.state_dict()`, is wrapped; the unwrap of a name the same file wraps
        in nn.DataParallel is DataParallel's, as in CodeT5's one-process arm).
        Programs that train nothing (no backward, zero_grad, fit or train call:
        evaluation, sampling) are left alone too, and so are programs that set the same
        constant seed again in another function (two runs made to draw the same numbers,
        to compare them). A seeding helper of the program (`def set_seed(seed):`, mostly
        seeding calls) is judged at its calls, where the rank term belongs: `set_seed(
        args.seed)` is reported there, `set_seed(args.seed + rank)` is not; so is a helper
        whose module is out of the checked tree, taken by its name (set_seed,
        set_random_seed, setup_seed, seed_everything, fix_seed; not a library's) when its call
        stands as a statement (`set_random_seed(config.seed)` from the project's own
        package; `seed = init_random_seed(...)` returns a seed and seeds nothing); a DataLoader
        worker init function that seeds with the rank (mmcv's `worker_init_fn(worker_id,
        num_workers, rank, seed)`) leaves the program alone: its workers draw the data's
        randomness. Reported once, at the first call.
    Why it matters:
        With the same seed, every rank draws the same random crops, flips, masks and dropout
        patterns: augmentation is correlated across ranks and the effective data diversity
        shrinks. DDP already broadcasts rank 0's initial weights, so a shared seed is not
        needed for that.
    Example:
        torch.manual_seed(42)
    Fix:
        torch.manual_seed(42 + dist.get_rank())
    """
    flow = flow_of(facts)
    if not flow.is_multiprocess or is_test_file(facts.path) or uses_tensor_parallel(facts):
        return
    if not trains(facts):  # evaluation or generation: no augmentation to correlate
        return
    if weights_never_broadcast(facts):  # the shared seed is what makes the weights equal
        return
    workers = spawned_code(facts)
    seeds = [
        s
        for s in seeding_calls(facts)
        if (in_worker(s, workers) if workers is not None else flow.in_distributed_region(s.ctx))
    ]
    seeds = [site for site in seeds if site.node.args or site.node.keywords]
    if not seeds or any(has_rank_term(facts, site) for site in seeds):
        return
    if other_draws_decide(facts):  # per-rank draws elsewhere, or shards that need one seed
        return
    if any(splits_data_after(facts, s) or splits_data_below(facts, s) for s in seeds):
        return
    if shards_a_shared_draw(facts):
        return
    if reseeds_to_compare(seeds):
        return
    seeds = [s for s in seeds if seeds_data(facts, s) and not reseeds_from_own_seed(facts, s)]
    if not seeds:
        return
    first, seed = seeds[0], seed_value(seeds[0])
    yield hit(
        facts,
        first.node,
        f"{text_of(first.node)} seeds every rank with the same value {text_of(seed)}",
        {"seed": text_of(seed)},
    )
