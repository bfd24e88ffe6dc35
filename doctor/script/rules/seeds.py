"""DDP122 (same-seed-every-rank): seeding calls that give every rank the same random stream."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script.facts import ScriptFacts, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.kinds import uses_tensor_parallel
from ddp_doctor.script.purpose import (
    is_test_file,
    shards_a_shared_draw,
    splits_data_after,
    trains,
    weights_never_broadcast,
)
from ddp_doctor.script.seeding import (
    other_draws_decide,
    reseeds_from_own_seed,
    reseeds_to_compare,
    seed_value,
    seeding_calls,
    seeds_data,
    splits_data_below,
)
from ddp_doctor.script.seedscope import imported_into_ranks, program_seeds_apart, seeds_apart
from ddp_doctor.script.workers import in_worker, spawned_code


@rule(
    "DDP122",
    Remediation("Seed data randomness with seed + rank (keep the model seed shared if needed)."),
)
def same_seed_every_rank(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        In a one-process-per-GPU script (an accelerate Accelerator program counts), seeding
        calls (torch.manual_seed, random.seed, np.random.seed, set_seed, seed_everything)
        whose seed has no rank term, when no seeding call of the program (the script and
        the modules of the tree it imports, or that import it; not the body of a seeding
        helper that nothing of the tree calls) uses the rank (accelerate's
        `set_seed(s, device_specific=True)` adds the process index; a seed drawn anew in
        each process, `set_seed(torch.seed() % 10**9)` or from os.urandom, differs per rank
        as well; a
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
        workers import the script again and run it, and every process of a launched
        program imports its modules (a dataset module's `np.random.seed(1)` at import runs
        on every rank); seeding only in the parent before
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
        in nn.DataParallel is DataParallel's, as in CodeT5's one-process arm; a library's
        wrap counts: fastai's `learn.to_distributed(rank)` or `distrib_ctx()`, Horovod's
        `broadcast_parameters`). Programs that train nothing (no backward, zero_grad, fit or train call:
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
        or imported_into_ranks(facts, s)
    ]
    seeds = [site for site in seeds if site.node.args or site.node.keywords]
    if not seeds or any(seeds_apart(facts, site) for site in seeds):
        return
    if program_seeds_apart(facts):  # another file of the program seeds with the rank
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
