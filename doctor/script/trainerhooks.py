"""Methods that a library trainer calls in every process its launcher starts, though no call
of the tree names them (DDP119): the hooks of a Lightning or transformers Trainer, and the
builders of a detectron2-family trainer."""

from __future__ import annotations

from ddp_doctor.script.facts import Context, ScriptFacts
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.loads import runs_as_framework_hook, runs_as_trainer_hook

# detectron2's DefaultTrainer.__init__ calls self.build_model, build_optimizer,
# build_train_loader, build_lr_scheduler and build_hooks in every process that `launch`
# starts; build_writers only under comm.is_main_process() (facebookresearch/detectron2,
# detectron2/engine/defaults.py). yolox and fastreid trainers follow the same design.
_LAUNCHED_TRAINER_BASES = ("detectron2.", "yolox.", "fastreid.")
_MAIN_PROCESS_BUILDERS = frozenset({"build_writers"})


def runs_as_library_trainer_method(facts: ScriptFacts, ctx: Context) -> bool:
    """A hook of a Lightning/transformers Trainer (see runs_as_trainer_hook), or a method of a
    subclass of a detectron2-family trainer that rank code instantiates (Mask2Former's
    `Trainer(DefaultTrainer).build_optimizer`, run by `launch(main, ...)` in each process)."""
    if runs_as_trainer_hook(facts, ctx):
        return True
    if ctx.function is not None and ctx.function.name in _MAIN_PROCESS_BUILDERS:
        return False
    return runs_as_framework_hook(facts, ctx, _LAUNCHED_TRAINER_BASES)


def runs_in_the_ranks(facts: ScriptFacts, ctx: Context) -> bool:
    """In the program's distributed region, or a library trainer's method run per rank."""
    return flow_of(facts).in_distributed_region(ctx) or runs_as_library_trainer_method(facts, ctx)
