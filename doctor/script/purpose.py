"""What a program does, read from its calls: whether it trains, how it reads its own
checkpoints back, and what the files it saves and loads hold (DDP116-DDP118, DDP122)."""

from __future__ import annotations

import ast
import os
import re
from typing import TYPE_CHECKING

from ddp_doctor.script import names
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, ClassInfo, Function, ScriptFacts, position
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.guards import is_wrapper_test
from ddp_doctor.script.rankflow import contains

if TYPE_CHECKING:
    from ddp_doctor.script.project import Project

# Calls that only a training program makes: a backward pass, an optimizer's zero_grad, a
# trainer's fit/train (Lightning, Hugging Face), model.train().
_TRAINING_KEYS = ("backward", "zero_grad", "fit", "train")


def trains(facts: ScriptFacts) -> bool:
    """Whether the program the file belongs to trains anything (else it only evaluates or
    generates: a shared seed correlates no augmentation there)."""
    return any(
        mate.calls_by_key.get(key) for mate in program_files(facts) for key in _TRAINING_KEYS
    )


# Calls that wrap, shard or broadcast a model, or hand it to a library that does (accelerate,
# Lightning, Fabric, DeepSpeed): after them rank 0's weights are every rank's.
_SYNCING_KEYS = (
    "DistributedDataParallel",
    "DDP",
    "FullyShardedDataParallel",
    "FSDP",
    "fully_shard",
    "broadcast",
    "broadcast_object_list",
    "_broadcast_coalesced",
    "sync_module_states",
    "prepare",
    "Accelerator",
    "Fabric",
    "Trainer",
    "initialize",
    "setup_module",
    "parallelize_module",
    # library wrappers that put the model in DDP or broadcast it: fastai's
    # `learn.to_distributed(rank)` and `with learn.distrib_ctx():`, Horovod's
    # `hvd.broadcast_parameters(model.state_dict(), root_rank=0)`
    "to_distributed",
    "distrib_ctx",
    "broadcast_parameters",
)


def weights_never_broadcast(facts: ScriptFacts) -> bool:
    """The program starts its process group itself and no file checked with it wraps, shards
    or broadcasts a model, nor unwraps one made out of view (`build_model(cfg)` of a module
    not checked, then `hasattr(model, "module")`): every rank keeps the weights it
    initialised."""
    if not any(mate.calls_to(names.INIT_PROCESS_GROUP) for mate in program_files(facts)):
        return False
    tree = facts.project.files.values()  # any file checked with it: a wrap may be out of view
    if any(
        _unwraps(site) and not _data_parallel_held(other, site)
        for other in tree
        for site in other.calls
    ):
        return False
    return not any(other.calls_by_key.get(key) for other in tree for key in _SYNCING_KEYS)


_STATE_METHODS = ("state_dict", "load_state_dict")


def _unwraps(site: CallSite) -> bool:
    """`hasattr(model, "module")`, `isinstance(model, DDP)`, `model.module.state_dict()`:
    the program holds a wrapped model."""
    func = site.node.func
    if isinstance(func, ast.Attribute) and func.attr in _STATE_METHODS:
        inner = func.value
        return isinstance(inner, ast.Attribute) and inner.attr == "module"
    return is_wrapper_test(site.node)


def _data_parallel_held(facts: ScriptFacts, unwrap: CallSite) -> bool:
    """The unwrapped name holds an nn.DataParallel of the same file (`model =
    torch.nn.DataParallel(model)` when several GPUs are visible, then `model.module if
    hasattr(model, "module") else model`: CodeT5's run_defect.py): the `.module` is
    DataParallel's, no sign of a DDP wrap out of view."""
    node = unwrap.node
    held = node.args[0] if is_wrapper_test(node) else node.func.value.value  # type: ignore[attr-defined]
    wraps = {id(site.node) for site in facts.calls_to(names.DATA_PARALLEL)}
    return any(id(a.value) in wraps and a.target == ast.unparse(held) for a in facts.assignments)


def reads_prefixed_keys_back(facts: ScriptFacts) -> bool:
    """Whether the program expects the "module." keys of a DDP wrapper's state_dict: it
    restores a state dict into a DDP-wrapped model (a resume: the keys must carry the
    prefix)."""
    mates = program_files(facts)
    for mate in mates:
        flow = flow_of(mate)
        for call in mate.methods_called("load_state_dict"):
            receiver = call.receiver
            if receiver is not None and flow.holds_wrapped_model(receiver, call.ctx, call.node):
                return True
    return _restores_through_helper(mates)


def _restores_through_helper(mates: list[ScriptFacts]) -> bool:
    """`restart_from_checkpoint(path, state_dict=model, optimizer=opt)` with `model` the DDP
    wrapper, where the helper calls load_state_dict on what its parameters hold (by name, or
    in a pass over its **kwargs): the resume reads the "module." keys back, as a direct one."""
    restorers = {f for mate in mates for f in _restoring_helpers(mate)}
    if not restorers:
        return False
    for mate in mates:
        flow = flow_of(mate)
        for key in {f.name for f in restorers}:
            for site in mate.calls_by_key.get(key, ()):
                if not restorers.intersection(flow.graph.targets(mate, site)):
                    continue
                passed = [*site.node.args, *(k.value for k in site.node.keywords if k.arg)]
                if any(flow.holds_wrapped_model(a, site.ctx, site.node) for a in passed):
                    return True
    return False


def _restoring_helpers(facts: ScriptFacts) -> set[Function]:
    """Functions that call load_state_dict on one of their parameters, or on a value taken
    from their parameters in a loop (`for key, value in kwargs.items():`)."""
    found: set[Function] = set()
    for call in facts.methods_called("load_state_dict"):
        function = call.ctx.function
        receiver = call.receiver
        if function is None or not isinstance(receiver, ast.Name):
            continue
        arguments = function.node.args
        inputs = set(function.params) | {a.arg for a in (arguments.kwarg, arguments.vararg) if a}
        if receiver.id in inputs or any(
            _loop_binds(loop.node, receiver.id, inputs) for loop in call.ctx.loops
        ):
            found.add(function)
    return found


def _loop_binds(loop: ast.AST, name: str, inputs: set[str]) -> bool:
    target = getattr(loop, "target", None)
    iterable = getattr(loop, "iter", None)
    if target is None or iterable is None:
        return False
    bound = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    used = {n.id for n in ast.walk(iterable) if isinstance(n, ast.Name)}
    return name in bound and bool(used & inputs)


def forwards_keywords(load: CallSite) -> bool:
    """torch.load(f, **kwargs) inside `def helper(path, **kwargs)`: map_location is the
    caller's to give (`helper(path, map_location=...)`)."""
    function = load.ctx.function
    kwarg = function.node.args.kwarg if function is not None else None
    if kwarg is None:
        return False
    return any(
        keyword.arg is None
        and isinstance(keyword.value, ast.Name)
        and keyword.value.id == kwarg.arg
        for keyword in load.node.keywords
    )


def forwarding_loaders(facts: ScriptFacts) -> set[Function]:
    """Functions of the program that hand their keyword arguments on to torch.load."""
    return {
        load.ctx.function
        for mate in program_files(facts)
        for load in mate.calls_to(names.TORCH_LOAD)
        if load.ctx.function is not None and forwards_keywords(load)
    }


def passes_keywords_on(site: CallSite) -> bool:
    """The call passes keyword arguments through `**options`: map_location may be in them."""
    return any(keyword.arg is None for keyword in site.node.keywords)


def loads_cpu_save(facts: ScriptFacts, load: CallSite) -> bool:
    """The file loaded is one the program saves itself from CPU tensors
    (torch.save(features.cpu(), join(d, "feat.pth")) ... torch.load(join(d, "feat.pth"))):
    nothing in it is restored onto a GPU."""
    wanted = _file_name(load.argument(0, "f"))
    if wanted is None:
        return False
    for mate in program_files(facts):
        for save in mate.calls_to(names.TORCH_SAVE):
            if _file_name(save.argument(1, "f")) == wanted:
                return _on_cpu(save.argument(0, "obj"))
    return False


def _file_name(path: ast.expr | None) -> str | None:
    """The last string constant of a path expression: the file's own name, if literal."""
    if path is None:
        return None
    found = [
        n.value
        for n in ast.walk(path)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "." in n.value
    ]
    return found[-1] if found else None


def _on_cpu(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict):
        return bool(value.values) and all(_on_cpu(item) for item in value.values)
    return isinstance(value, ast.Call) and names.last_identifier(value.func) == "cpu"


def in_memory(facts: ScriptFacts, save: CallSite) -> bool:
    """A save into an io.BytesIO buffer (made there, or assigned in the same function):
    it writes no file that ranks could share."""
    target = save.argument(1, "f")
    if target is None:
        return False
    if _is_buffer(target):
        return True
    if not isinstance(target, ast.Name):
        return False
    return any(
        _is_buffer(a.value) and a.ctx.function is save.ctx.function
        for a in facts.assignments_by_target.get(target.id, ())
    )


def _is_buffer(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and names.last_identifier(value.func) == "BytesIO"


def unwrapped_here(facts: ScriptFacts, call: CallSite, receiver: ast.expr) -> bool:
    """In the arm of a wrapper test that holds no wrapper, or after `x = x.module`."""
    for branch in call.ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is None:
            continue
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        core = test.operand if negated else test  # type: ignore[attr-defined]
        if is_wrapper_test(core) and branch.arm == negated:
            return True
    text = names.access_path(receiver)
    for assignment in facts.assignments_by_target.get(text or "", ()):
        if (
            is_unwrap(assignment.value)
            and assignment.ctx.function is call.ctx.function
            and (position(assignment) < position(call))
        ):
            return True
    return False


def is_unwrap(value: ast.expr) -> bool:
    """`m.module`, `unwrap_model(m)`, `getattr(m, "module", m)`, and a conditional unwrap
    `m.module if ddp else m` (the wrapper's arm unwraps, the other holds the plain model)."""
    if isinstance(value, ast.Attribute) and value.attr == "module":
        return True
    if isinstance(value, ast.Call):
        called = names.last_identifier(value.func) or ""
        if "unwrap" in called:
            return True
        first = value.args[1] if called == "getattr" and len(value.args) >= 2 else None
        return isinstance(first, ast.Constant) and first.value == "module"
    if isinstance(value, ast.IfExp):
        arms = (value.body, value.orelse)
        for unwrapped, plain in (arms, arms[::-1]):
            if isinstance(unwrapped, ast.Attribute) and unwrapped.attr == "module":
                return names.dotted(unwrapped.value) == names.dotted(plain)
    return False


def is_saved(facts: ScriptFacts, call: CallSite, saves: list[CallSite]) -> bool:
    same_function = [s for s in saves if s.ctx.function is call.ctx.function]
    if any(contains(save.node, call.node) for save in same_function):
        return True
    for assignment in facts.assignments:
        if assignment.element:
            continue
        if assignment.ctx.function is call.ctx.function and contains(assignment.value, call.node):
            root = re.split(r"[.\[]", assignment.target, maxsplit=1)[0]
            return any(
                names.dotted(arg) in (assignment.target, root)
                for save in same_function
                if position(save) > position(assignment)
                for arg in [*save.node.args, *(kw.value for kw in save.node.keywords)]
            )
    return False


# Random draws that split or order a dataset: every rank must draw the same split, so the seed
# before them is shared on purpose (huggingface/accelerate examples/cv_example.py: "Set the
# seed before splitting the data", then np.random.permutation).
DATA_SPLITS = (
    "numpy.random.permutation",
    "numpy.random.shuffle",
    "random.shuffle",
    "torch.randperm",
    "torch.utils.data.random_split",
    "sklearn.model_selection.train_test_split",
)


def splits_data_after(facts: ScriptFacts, seed: CallSite) -> bool:
    """A data split drawn after the seeding call, in the same function."""
    return any(
        split.ctx.function is seed.ctx.function and position(split) > position(seed)
        for split in facts.calls_to(*DATA_SPLITS)
    )


def shards_a_shared_draw(facts: ScriptFacts) -> bool:
    """The program builds a sampler of its own that shards a random draw by rank: each rank
    shuffles the whole index list (random.shuffle, np.random.permutation, torch.randperm with
    the global generator) and keeps its share, so every rank needs the same seed. A sampler
    class of the project that is not in the checked tree, named for distributed use
    (llama-cookbook's DistributedLengthBasedBatchSampler), may do so: out of view, not judged."""
    for mate in program_files(facts):
        for site in mate.calls:
            if "Sampler" not in site.key or site.key == "DistributedSampler":
                continue
            defined = mate.project.definition(mate, site.node.func, site.ctx)
            if isinstance(defined, ClassInfo):
                if _draws_globally(mate.project, defined):
                    return True
            elif defined is None and "Distributed" in site.key and _own_unseen(mate, site):
                return True
    return False


def _draws_globally(project: Project, cls: ClassInfo) -> bool:
    for method in cls.methods.values():
        owner = project.owner(method)
        start, end = method.node.lineno, method.node.end_lineno or method.node.lineno
        for draw in owner.calls_to(*DATA_SPLITS):
            if start <= draw.node.lineno <= end and draw.keyword("generator") is None:
                return True
    return False


def _own_unseen(facts: ScriptFacts, site: CallSite) -> bool:
    """A call of the file's own package (its top-level name is a folder above the file)."""
    qualified = facts.resolve(site)
    if qualified is None:
        return False
    folders = os.path.dirname(os.path.abspath(facts.path)).split(os.sep)
    return qualified.partition(".")[0] in folders


def is_test_file(path: str) -> bool:
    name = os.path.basename(path)
    parts = os.path.normpath(path).split(os.sep)
    return name.startswith("test_") or name.endswith("_test.py") or "tests" in parts[:-1]
