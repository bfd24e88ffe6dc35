"""Flags that turn the distributed path off without GPUs (DDP106's fallback held in a value).

maskrcnn-benchmark's entry points, and the many scripts copied from them, decide once:

    args.distributed = num_gpus > 1
    if not args.no_cuda and torch.cuda.is_available():
        args.device = "cuda"
    else:
        args.distributed = False
    if args.distributed:
        dist.init_process_group(backend="nccl")

NCCL is then never chosen without CUDA: the flag guarding the init is set false on the path
the availability check rules out. The flag is followed by the tree's data flow (values.py),
not by its name: any flag guarding the init counts when one of its values is a false
constant stored under an availability check, or when it is stored from such a check
(`distributed = torch.cuda.device_count() > 1`).

The same holds for an init reached only when a CPU setting's test is false (the BERT examples
of huggingface, copied by hundreds of repositories, CodeT5 among them; pytorch/examples-style
TrainingArguments in SimCSE):

    if args.local_rank == -1 or args.no_cuda:   # one disjunct of the test switches to CPU
        device = torch.device("cuda" if ... and not args.no_cuda else "cpu")
    else:
        dist.init_process_group(backend="nccl")

    if self.no_cuda: device = cpu               # an earlier arm of the if/elif chain
    elif self.local_rank == -1: ...
    else: dist.init_process_group(backend="nccl")

The setting is read by its name (`no_cuda`, `use_cpu`, `cpu`, `device == "cpu"`, `not
args.cuda`): the init runs only where the user did not ask for the CPU.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.script.availability import asks_availability
from ddp_doctor.script.facts import Context, ScriptFacts
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.origins import CONSTANT, Origin


def guarded_by_gpu_flag(facts: ScriptFacts, ctx: Context) -> bool:
    """A condition around this place is true only where CUDA was found (see the module)."""
    values = facts.project.values
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is not None and not branch.arm and any(map(_asks_for_cpu, _disjuncts(test))):
            return True
        if test is None or not branch.arm:
            continue
        for flag in _flags(test):
            if any(_off_without_gpus(o) for o in values.origins(facts, flag, ctx)):
                return True
    return False


def _flags(test: ast.expr) -> Iterator[ast.expr]:
    """The names a true test requires: `flag`, `args.distributed`, each operand of an `and`."""
    if isinstance(test, (ast.Name, ast.Attribute)):
        yield test
    elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for value in test.values:
            yield from _flags(value)


def _disjuncts(test: ast.expr) -> Iterator[ast.expr]:
    """The tests a false test rules out: the test, each operand of an `or`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        for value in test.values:
            yield from _disjuncts(value)
    else:
        yield test


_NO_GPU_PREFIXES = ("no_", "no", "disable_", "without_", "not_")


def _asks_for_cpu(test: ast.expr) -> bool:
    """A setting true when the user asked for the CPU: `args.no_cuda`, `cfg["use_cpu"]`,
    `args.device == "cpu"`, `not args.cuda`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        word = _setting(test.operand)
        return word is not None and ("cuda" in word or "use_gpu" in word) and not _negative(word)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = (test.left, test.comparators[0])
        return any(isinstance(side, ast.Constant) and side.value == "cpu" for side in sides)
    word = _setting(test)
    if word is None or any(other in word for other in _NOT_A_SWITCH):
        return False  # `args.cpu_offload`, `num_cpus`: not a choice of the device
    return "cpu" in word or _negative(word)


_NOT_A_SWITCH = ("offload", "count", "num", "thread", "worker")


def _negative(word: str) -> bool:
    """`no_cuda`, `nogpu`, `disable_cuda`: a setting that turns the GPUs off."""
    return any(word.startswith(p + hw) for p in _NO_GPU_PREFIXES for hw in ("cuda", "gpu"))


def _setting(node: ast.expr) -> str | None:
    """The lower-cased name of `flag`, `args.flag` or the key of `config["flag"]`."""
    if isinstance(node, ast.Name):
        return node.id.lower()
    if isinstance(node, ast.Attribute):
        return node.attr.lower()
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        key = node.slice.value
        return key.lower() if isinstance(key, str) else None
    return None


def _off_without_gpus(origin: Origin) -> bool:
    if origin.facts is None or not isinstance(origin.node, ast.expr):
        return False
    assignment = flow_of(origin.facts).assignment_of(origin.node)
    if assignment is None:
        return False
    if origin.kind == CONSTANT:
        value = origin.node.value  # type: ignore[attr-defined]
        return not value and _under_check(assignment.ctx)
    whole = assignment.value is origin.node and _is_boolean(origin.node)
    return whole and asks_availability(origin.node, origin.facts, assignment.ctx)


def _under_check(ctx: Context) -> bool:
    return any(
        asks_availability(test)
        for branch in ctx.branches
        if (test := getattr(branch.node, "test", None)) is not None
    )


def _is_boolean(node: ast.expr) -> bool:
    """A comparison, a negation or an availability call: a yes/no about the GPUs, not a count
    (`world_size = torch.cuda.device_count()` sizes the world)."""
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.Not)
    if isinstance(node, ast.Call):
        return getattr(node.func, "attr", getattr(node.func, "id", "")).startswith("is_")
    return isinstance(node, (ast.Compare, ast.BoolOp))
