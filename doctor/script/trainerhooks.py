"""Methods that a library trainer calls in every process its launcher starts, though no call
of the tree names them (DDP119): the hooks of a Lightning or transformers Trainer, and the
builders of a detectron2-family trainer."""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import Context, ScriptFacts
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.loads import runs_as_framework_hook, runs_as_trainer_hook

# detectron2's DefaultTrainer.__init__ calls self.build_model, build_optimizer,
# build_train_loader, build_lr_scheduler and build_hooks in every process that `launch`
# starts; build_writers only under comm.is_main_process() (facebookresearch/detectron2,
# detectron2/engine/defaults.py). yolox and fastreid trainers follow the same design.
_LAUNCHED_TRAINER_BASES = ("detectron2.", "yolox.", "fastreid.")
_MAIN_PROCESS_BUILDERS = frozenset({"build_writers"})
# The builders that DefaultTrainer.__init__ calls; what a project's own copy of the class
# (OneFormer's trainers/trainer.py TPDefaultTrainer, libai's and fastreid's DefaultTrainer)
# keeps, when the copy is out of view and only its name says what it is.
_INIT_BUILDERS = frozenset(
    {"build_model", "build_optimizer", "build_train_loader", "build_lr_scheduler", "build_hooks"}
)
_COPIED_TRAINER_SUFFIX = "DefaultTrainer"


def runs_as_library_trainer_method(facts: ScriptFacts, ctx: Context) -> bool:
    """A hook of a Lightning/transformers Trainer (see runs_as_trainer_hook), or a method of a
    subclass of a detectron2-family trainer that rank code instantiates (Mask2Former's
    `Trainer(DefaultTrainer).build_optimizer`, run by `launch(main, ...)` in each process)."""
    if runs_as_trainer_hook(facts, ctx):
        return True
    if ctx.function is not None and ctx.function.name in _MAIN_PROCESS_BUILDERS:
        return False
    return runs_as_framework_hook(facts, ctx, _LAUNCHED_TRAINER_BASES) or _copied_trainer_builder(
        facts, ctx
    )


def _copied_trainer_builder(facts: ScriptFacts, ctx: Context) -> bool:
    """A DefaultTrainer builder (build_optimizer, ...) of a class whose base is out of view and
    named like detectron2's DefaultTrainer (`class Trainer(TPDefaultTrainer)`), in a file of a
    detectron2-family program, when rank code instantiates the class."""
    function = ctx.function
    if function is None or function.class_name is None or function.name not in _INIT_BUILDERS:
        return False
    known = facts.classes.get(function.class_name)
    if known is None or not _imports_trainer_family(facts):
        return False
    if not any(_out_of_view_copy(facts, base, ctx) for base in known.node.bases):
        return False
    flow = flow_of(facts)
    return any(
        flow.in_distributed_region(site.ctx)
        for site in facts.calls_by_key.get(function.class_name, ())
    )


def _imports_trainer_family(facts: ScriptFacts) -> bool:
    roots = tuple(base.rstrip(".") for base in _LAUNCHED_TRAINER_BASES)
    return any(ref.module.split(".")[0] in roots for ref in facts.imports.refs.values())


def _out_of_view_copy(facts: ScriptFacts, base: ast.expr, ctx: Context) -> bool:
    text = names.dotted(base) or ""
    if not text.rsplit(".", 1)[-1].endswith(_COPIED_TRAINER_SUFFIX):
        return False
    qualified = facts.qualname(base) or text
    if qualified.startswith(_LAUNCHED_TRAINER_BASES):
        return False  # the library's own: runs_as_framework_hook judges it
    return facts.project.definition(facts, base, ctx) is None


def runs_in_the_ranks(facts: ScriptFacts, ctx: Context) -> bool:
    """In the program's distributed region, or a library trainer's method run per rank."""
    return flow_of(facts).in_distributed_region(ctx) or runs_as_library_trainer_method(facts, ctx)
