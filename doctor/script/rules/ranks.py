"""Rules about what runs on which rank: checkpoints, loading, logging, collectives."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script import names
from ddp_doctor.script.bars import names_the_rank
from ddp_doctor.script.defaults import never_taken
from ddp_doctor.script.facts import ScriptFacts, text_of
from ddp_doctor.script.firstrank import prepared_by_rank_zero_first
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.logsites import (
    LOG_KEYS,
    SILENCES_PRINT,
    in_handler,
    is_event_report,
    launcher_redirects_stdout,
    log_kind,
    only_when_missing,
    opted_in_per_rank,
    print_replaced,
    print_setup_files,
    turns_itself_off,
)
from ddp_doctor.script.oneworld import one_process_world
from ddp_doctor.script.printfamily import references_family_silences_print
from ddp_doctor.script.purpose import (
    is_saved,
    unwrapped_here,
)
from ddp_doctor.script.rankflow import (
    collective_helpers,
    logging_quiet,
    matched_in_other_arm,
    paired_collectives,
    save_calls,
    wrapped_model_helpers,
)
from ddp_doctor.script.savedvalues import (
    in_data_parallel_only_arm,
    saved_through_names,
    treated_as_fsdp,
)
from ddp_doctor.script.saveskips import save_left_alone
from ddp_doctor.script.trainerhooks import runs_in_the_ranks
from ddp_doctor.script.unseenrestores import expects_prefixed_keys


@rule(
    "DDP116",
    Remediation(
        "Save on rank 0 only (if dist.get_rank() == 0: torch.save(...)), then dist.barrier() "
        "before any rank loads it."
    ),
)
def save_on_every_rank(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        torch.save in a one-process-per-GPU script that is not under a rank-0 guard: not in
        `if rank == 0:` (or is_main_process(), local_rank in [-1, 0], ...), not after
        `if rank != 0: return`, and not in a function that is only called under such a guard.
        Saves to a path that contains the rank, and into an io.BytesIO buffer, are left alone,
        and so is a cache written when it is missing under a block that lets rank 0 through
        first (`with torch_distributed_zero_first(rank):`, `main_process_first()`): rank 0
        writes it, the others find it and read it; and so is a dataset's file per sample,
        written where it is missing by a method its `__getitem__` reaches, to a path built
        from that method's parameter (vits' `get_audio(filename)` caching `*.spec.pt`).
        The hooks of a Trainer callback that rank code registers or hands to the Trainer
        (a transformers TrainerCallback's on_save, `callbacks=[Cls]`; a Lightning Callback)
        run in every process: the Trainer calls them there (as for DDP118 and DDP119); a
        Lightning CheckpointIO plugin's save_checkpoint runs on global rank 0 only. A save
        in a helper module's function that nothing of the tree calls or names (itself or
        through its callers) is left to its callers out of view, who choose the ranks
        (wenet's checkpoint.save_checkpoint, called under `if rank == 0:`), also when the
        helper is checked alone; with no entry point in view, a file that calls distributed
        APIs itself (an init, a wrap, a collective) is judged as it is.
    Why it matters:
        N processes writing one file interleave their bytes: a truncated or corrupt checkpoint
        that fails only when it is loaded, days later.
    Example:
        for epoch in range(epochs):
            train_one_epoch(model, loader)
            torch.save(model.module.state_dict(), "checkpoint.pt")
    Fix:
        if dist.get_rank() == 0:
            torch.save(model.module.state_dict(), "checkpoint.pt")
        dist.barrier()
    """
    flow = flow_of(facts)
    if not flow.is_multiprocess:
        return
    for save in facts.calls_to(names.TORCH_SAVE):
        if flow.runs_on_rank_zero_only(save.ctx) or not runs_in_the_ranks(facts, save.ctx):
            continue
        if save_left_alone(facts, save):
            continue
        path = save.argument(1, "f")
        where = f" in {save.ctx.function.qualname}()" if save.ctx.function else ""
        yield hit(
            facts,
            save.node,
            f"torch.save({text_of(save.argument(0, 'obj'))}, {text_of(path)}){where} runs on "
            "every rank",
            {"path": text_of(path)},
        )


@rule(
    "DDP117",
    Remediation("Save model.module.state_dict() (the unwrapped model), not the DDP wrapper's."),
)
def state_dict_module_prefix(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        x.state_dict() saved (inside torch.save, a save helper, or a dict that is then saved,
        also through the names and dicts that hold it: `state = model.state_dict()`, `ckpt =
        {"model": state}`, `torch.save(ckpt, path)`)
        where x may hold the DDP-wrapped model at that point: assigned the wrapper earlier, a
        `self.model` wrapped in another method, or a parameter that a caller passes the
        wrapper to (`train(ddp_model, ...)`, in any module of the tree). Not in the `else` of
        `hasattr(x, "module")` / `isinstance(x, DDP)` (the `else` of a test that names only
        nn.DataParallel counts: DDP is no DataParallel, so the wrapper takes that arm), nor
        after `x = x.module`, nor in an arm that first hands x to an FSDP API (an FSDP module
        there, `FSDP.set_state_dict_type(x, ...)`: its full state dict has no prefix); not in a
        program that expects the prefix: one that restores a state dict into the DDP-wrapped
        model (a resume reads the "module." keys back), directly or through a helper it hands
        the wrapper to (`restart_from_checkpoint(path, state_dict=model)` calling
        load_state_dict on what its parameters hold, or one out of view whose name says it
        restores a checkpoint: `utils.load_checkpoint(path, encoder=encoder)`).
    Why it matters:
        DDP's state_dict prefixes every key with "module.". Loading the checkpoint into a
        plain model (for inference, fine-tuning, or a single-GPU run) fails with "Missing
        key(s) ... Unexpected key(s) module.conv1.weight".
    Example:
        model = DDP(model, device_ids=[local_rank])
        torch.save(model.state_dict(), "model.pt")
    Fix:
        torch.save(model.module.state_dict(), "model.pt")
    """
    flow = flow_of(facts)
    saves = save_calls(facts)
    calls = facts.methods_called("state_dict")
    if not calls or expects_prefixed_keys(facts):
        return
    for call in calls:
        receiver = call.receiver
        if receiver is None or call.node.args:
            continue
        if not (is_saved(facts, call, saves) or saved_through_names(facts, call, saves)):
            continue
        if treated_as_fsdp(facts, call, receiver):
            continue
        if unwrapped_here(facts, call, receiver) and not in_data_parallel_only_arm(
            facts, call, receiver
        ):
            continue
        if flow.holds_wrapped_model(receiver, call.ctx, call.node):
            yield hit(
                facts,
                call.node,
                f"{text_of(receiver)} is the DDP wrapper: its state_dict() keys start with "
                f"'module.'; save {text_of(receiver)}.module.state_dict()",
                {"model": text_of(receiver)},
            )


@rule(
    "DDP119",
    Remediation("Log, print, open progress bars and wandb/tensorboard runs on rank 0 only."),
)
def log_on_every_rank(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        In a one-process-per-GPU script (an accelerate Accelerator program counts: `accelerate
        launch` runs it once per GPU; so does a Lightning Fabric given devices or a strategy,
        whose launch() runs the program in each process it starts), outside rank-0-only
        code (in a notebook that hands a function to accelerate's notebook_launcher, the
        cells' own code runs once, in the kernel; only the launched function runs per rank): print/logging inside a loop (or in a function the loop calls directly: a
        progress meter's display(); a pass over a mapping's entries, `for k, v in
        kwargs.items():`, a list of a config's keys or of names the body compares with
        strings, `for name in names: if name == "LASOT":`, a setting split into the items
        listed, `for key in args.checkpoint_key.split(","):`, or a retry loop of one pass,
        `num_tries = 1; for i in range(num_tries):`, is no loop; a base class's loop
        that calls `self.hook()` runs the subclasses' own hook),
        tqdm(...) or trange(...) without disable= (tqdm(None, desc=...), a line of results,
        counts as a print; `leave=(rank == 0)` only keeps rank 0's bar once the loop ends),
        wandb.init/wandb.log, and tensorboard SummaryWriter(). The builders of a
        detectron2-family trainer subclass (build_optimizer, build_model: DefaultTrainer's
        __init__ calls them in every process `launch` starts; build_writers, called on the
        main process only, is not reported) run per rank too, also where the base is out of
        view and named like it in a detectron2 program (`Trainer(TPDefaultTrainer)`, the
        project's own copy: its __init__'s builders only). The hooks of a
        Trainer callback that rank code registers (a transformers TrainerCallback's
        on_evaluate, `trainer.add_callback(Cls)`, `callbacks=[Cls]`; a Lightning Callback) run
        in every process: the Trainer calls them there (its own ProgressCallback guards with
        `state.is_world_process_zero`).
        One finding per kind, the other lines listed. Skipped where print is overridden off
        rank 0 (builtins.print replaced, or a helper named for it called: setup_for_distributed,
        suppress_output, _restrict_print_to_main_process, or print called anywhere in the program with a
        keyword the builtin print does not take: `print(..., force=True)`, or a module out of
        view of torchvision's references utils.py family, copied as util/misc.py by DETR,
        DeiT and MAE, whose init_distributed_mode the program calls and whose MetricLogger or
        SmoothedValue it uses: that init_distributed_mode calls setup_for_distributed; for a
        helper that no entry point of the tree reaches, the files that import it count as
        its program),
        for print where a Python launcher of the tree starts one interpreter per process
        with a `stdout=` of its own (tacotron2's multiproc.py sends ranks > 0 to log files),
        for messages that include the rank (a tqdm's desc= or position= too), for reports
        of a NaN or a missing gradient, for an error printed in a branch that then raises or exits or in an
        `except` block (printed by the rank it happened on), for a message in a branch that
        then leaves the loop (`print("Done!"); break`), for a branch that turns itself off
        (`if need_profiling: ...; need_profiling = False`), for a branch that lets rank 0 or,
        by the configuration's choice, every rank through (`if rank == 0 or not
        cfg.rank_zero_only:`), for the building of a cache that rank 0 makes first (see
        DDP116: the others find it made) or that runs only where a file is missing (a
        download's progress bar), for print(..., file=f) into a file, and for logging where
        the file does not set logging up itself (it is configured elsewhere, often per rank)
        or its program sets it up per rank (an entry point's setLevel under a rank guard, a
        basicConfig in a function only rank 0 calls). Nor in a program whose every process
        group that can start has one process (`init_process_group(..., world_size=1,
        rank=0)`, a multi-GPU arm that exits before its own init: VMamba's analyze/eval.py):
        it has one rank.
    Why it matters:
        Every line appears world_size times, progress bars fight over the terminal, wandb
        starts one run per GPU and tensorboard writes one event file per rank.
    Example:
        for step, batch in enumerate(loader):
            print(f"step {step} loss {loss.item()}")
    Fix:
        if dist.get_rank() == 0:
            print(f"step {step} loss {loss.item()}")
    """
    flow = flow_of(facts)
    if not flow.is_multiprocess or one_process_world(facts):
        return  # one rank: every line is printed once
    setup_files = [f for f in print_setup_files(facts) if f.is_python]
    quiet_print = (
        launcher_redirects_stdout(facts)
        or any(
            f.print_overridden
            or print_replaced(f)
            or any(SILENCES_PRINT.fullmatch(key) for key in f.calls_by_key)
            for f in setup_files
        )
        or references_family_silences_print(setup_files)
    )
    quiet_logging = logging_quiet(facts)
    for call in (c for key in LOG_KEYS for c in facts.calls_by_key.get(key, ())):
        kind = log_kind(facts, call, quiet_print, quiet_logging)
        if kind is None or flow.runs_on_rank_zero_only(call.ctx) or is_event_report(call.ctx):
            continue
        if turns_itself_off(facts, call.ctx) or in_handler(facts, call):
            continue
        if opted_in_per_rank(call.ctx) or not runs_in_the_ranks(facts, call.ctx):
            continue
        if prepared_by_rank_zero_first(facts, call.ctx, call.node.lineno) or only_when_missing(
            facts, call.ctx
        ):
            continue  # building a missing cache (rank 0 first, or once: a download's bar)
        if names_the_rank(call):
            continue  # the rank in the message, a bar's desc= or position=: one per rank, meant
        if never_taken(facts.project.values, facts, call.ctx):
            continue  # `if enable_print:` with enable_print False wherever it comes from
        yield hit(
            facts,
            call.node,
            f"{text_of(call.node.func)}(...) runs on every rank",
            {"kind": kind},
            cause=kind,
        )


@rule(
    "DDP120",
    Remediation(
        "Call collectives (barrier, all_reduce, DDP forward) on every rank, "
        "outside `if rank == 0:`."
    ),
)
def collective_under_rank_guard(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        dist.barrier, all_reduce, broadcast, all_gather and the other collectives, a call of
        the DDP model outside no_grad, and calls of local helpers that run collectives or run
        the DDP model handed to them forward outside no_grad (an LR finder that trains on rank
        0 only), inside a branch that only some ranks take. The paired pattern "barrier for rank != 0, work,
        barrier for rank 0" (first process downloads) is recognised and left alone, and so
        are the `else` of a rank test joined with another condition (`if rank == 0 and step %
        10 == 0:`) and the code after an exit on one (`if num_gpus == 1 and rank != 0: raise
        ...`, a check of the one-GPU run): every rank can get there.
    Why it matters:
        A collective completes only when every rank calls it. Rank 0 waits in the barrier
        forever while the others never arrive (or the reverse), until the NCCL watchdog
        kills the job minutes later with a timeout that names no line.
    Example:
        if rank == 0:
            evaluate(model)
            dist.barrier()
    Fix:
        if rank == 0:
            evaluate(model)
        dist.barrier()
    """
    flow = flow_of(facts)
    paired = paired_collectives(facts)
    for call in facts.calls_to(*names.COLLECTIVES):
        guard = call.ctx.guard
        if guard is None or (call.ctx.function, facts.resolve(call)) in paired:
            continue
        if matched_in_other_arm(call):
            continue
        yield hit(
            facts,
            call.node,
            f"{text_of(call.node.func)}() runs only on {_who(guard.polarity)} "
            f"(guard at line {guard.node.lineno}): the other ranks never join it",
        )
    for call, helper in collective_helpers(facts):
        yield hit(
            facts,
            call.node,
            f"{text_of(call.node.func)}() runs {helper} (a collective) only on "
            f"{_who(call.ctx.guard.polarity)}: the other ranks never join it",  # type: ignore[union-attr]
        )
    for call, parameter in wrapped_model_helpers(facts):
        yield hit(
            facts,
            call.node,
            f"{text_of(call.node.func)}() runs the DDP model (its {parameter!r}) forward only on "
            f"{_who(call.ctx.guard.polarity)}: its gradient all-reduce will wait for ranks that "  # type: ignore[union-attr]
            "never run it",
        )
    for call in facts.calls:
        func = call.node.func
        if call.ctx.guard is None or call.ctx.no_grad or names.dotted(func) is None:
            continue
        if flow.holds_wrapped_model(func, call.ctx, call.node):
            yield hit(
                facts,
                call.node,
                f"the DDP model {text_of(func)} runs forward only on {_who(call.ctx.guard.polarity)}"
                ": its gradient all-reduce will wait for ranks that never run it",
            )


def _who(polarity: str) -> str:
    return "rank 0" if polarity == "zero" else "ranks other than 0"
