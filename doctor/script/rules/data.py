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
from ddp_doctor.script.loaderreads import read_in_one_pass, reads_one_batch
from ddp_doctor.script.oneworld import one_process_world
from ddp_doctor.script.samplerchecks import never_shuffled, truncates_to_dataset
from ddp_doctor.script.samplers import SamplerFlow, SamplerUse, looks_like_eval


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
        A loader read for one batch only (every loop over it left by an unconditional `break`
        in its first pass, or `next(iter(loader))`) is a sanity check, not the training one.
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
        if target is not None and reads_one_batch(facts, loader.ctx, target):
            continue  # `for batch in loader: show(batch); break`: a sanity check, no training
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
        A constant set_epoch after a `set_epoch(epoch)` of the same sampler in the same loop
        only fixes the order of an extra pass (`set_epoch(0)` before an evaluation over the
        training loader).
        A single pass over the data needs no set_epoch (one `batches = iter(loader)` made in
        no loop, then `next(batches)` at every step; not an iterator made again when the data
        runs out, `except StopIteration: batches = iter(loader)`): nor does a loader that nothing iterates
        (a training loader an evaluation script builds and never reads), one iterated only
        under an evaluation name (`test_loader = subset_loader(...)`, then `for batch in
        test_loader` once per seed), or a sampler built in a helper from a `shuffle`
        parameter that every call path reaching its arm sets to False (`elif type ==
        SamplerType.DISTRIBUTED: return DistributedSampler(ds, shuffle=shuffle)`, chosen only
        by evaluation loaders that pass shuffle=False), or a sampler built inside the epoch
        loop with a seed from the loop variable (`DistributedSampler(ds, seed=seed + epoch)`:
        a new order each epoch). A retry loop of one pass is no epoch loop: its body, or
        the `try` in it, ends with an unconditional break (`while bs > 0: try: evaluate(bs);
        break; except RuntimeError: bs //= 2`). A loader handed to a library call that
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
        if epochs is None and _read_in_one_pass(facts, use):
            continue  # `batches = iter(loader)` once, then next(batches) per step
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


def _read_in_one_pass(facts: ScriptFacts, use: SamplerUse) -> bool:
    """Every name that holds the loader is bound here and read once through (loaderreads)."""
    held = use.loader_names | use.returned_to
    bound = {name: facts.assignments_by_target.get(name, ()) for name in held}
    if not held or not all(bound.values()):
        return False
    stores = [(assignment.ctx, name) for name, found in bound.items() for assignment in found]
    return read_in_one_pass(facts, stores, handed=bool(use.returned_to))


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
        if _set_per_epoch_in_the_same_loop(facts, call):
            return None  # set_epoch(epoch) first, then set_epoch(0) for a fixed-order pass
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


def _set_per_epoch_in_the_same_loop(facts: ScriptFacts, call: CallSite) -> bool:
    """Another set_epoch of the same sampler, with a varying argument, runs in a loop around
    this constant one (`sampler.set_epoch(epoch)` at the top of the epoch, `set_epoch(0)`
    before an evaluation pass over the training loader: flow_matching's image train.py)."""
    if call.receiver is None or not call.ctx.loops:
        return False
    receiver, loops = text_of(call.receiver), {id(loop.node) for loop in call.ctx.loops}
    for other in facts.calls_by_key.get("set_epoch", ()):
        argument = other.node.args[0] if other.node.args else other.keyword("epoch")
        if other is call or argument is None or isinstance(argument, ast.Constant):
            continue
        earlier = other.node.lineno < call.node.lineno
        same = earlier and other.receiver is not None and text_of(other.receiver) == receiver
        if same and loops & {id(loop.node) for loop in other.ctx.loops}:
            return True
    return False


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
        `return data_loaders[0]`: maskrcnn-benchmark's make_data_loader). A sampler that a
        helper out of view makes, named for it (`sampler = utils.create_sampler(dataset,
        shuffle, cfg)`; build_, make_, get_...sampler), handed to the loader as sampler= in a
        module that imports torch's DistributedSampler, counts as torch's. And a call of a
        factory that builds one padding sampler per dataset from a list of shuffle flags
        (`create_sampler(datasets, [True, False], ...)`, the False ones being evaluation
        samplers), unless the program drops the duplicates from its results
        (`remove_duplicate=...`). A converter that rebuilds the training and the evaluation
        loader alike, each in place on an object, for a shared loop (`self.dls.train =
        wrap(self.dls.train)`, the same for `.valid`; `for batch in self.dl`), is judged
        only where a loop of the program iterates under an evaluation name (a factory
        given the datasets, `self.test_loader = prepare(test_set)`, is judged as above).
        A program whose every process group that can start has one process
        (`init_process_group(..., world_size=1, rank=0)`, a multi-GPU arm that exits before
        its own init) is not judged: a sampler of one replica pads nothing.
    Why it matters:
        DistributedSampler pads the dataset with repeated samples so that it divides evenly
        by world_size. Averaged metrics then count some samples twice, silently.
    Example:
        val_sampler = DistributedSampler(val_set, shuffle=False)
    Fix:
        Evaluate on rank 0 with a plain DataLoader, or all_reduce correct and total counts and
        truncate to len(val_set).
    """
    if one_process_world(facts):
        return  # one replica: the sampler pads nothing
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
