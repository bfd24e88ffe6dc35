"""Rank guards: which `if` tests let only rank 0 (or only the other ranks) through.

Recognised: comparisons of a rank-like value with 0 (`rank == 0`, `args.local_rank in [-1, 0]`,
`dist.get_rank() != 0`, `args.rank % ngpus_per_node == 0`) or with another single rank
(`rank == world_size - 1`: one rank, treated like rank 0), main-process predicates
(`is_main_process()`, `accelerator.is_main_process`, `trainer.is_global_zero`, a backend
layer's `distr_backend.is_root_worker()` / `is_local_root_worker()`), `not`, and
`and`/`or` around them.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Mapping

from ddp_doctor.script.facts import NONZERO, ZERO
from ddp_doctor.script.names import dotted, last_identifier

_RANK_LIKE = frozenset(
    {
        "gpu",
        "gpu_id",
        "gpuid",
        "device_id",
        "process_index",
        "local_process_index",
        "proc_id",
        "procid",
        "process_id",
        "gpu_rank",
        "ddp_rank",
        "device_rank",
        "rank_id",
        "worker_rank",
    }
)
_MAIN_PROCESS = frozenset(
    {
        "is_main_process",
        "is_master",
        "master_process",
        "main_process",
        "is_main",
        "is_rank_zero",
        "is_rank0",
        "rank0",
        "rank_zero",
        "is_global_zero",
        "is_local_main_process",
        "is_world_process_zero",
        "is_local_process_zero",
        "is_primary",
        "is_chief",
        "is_leader",
        "is_master_process",
        "master",
        "is_main_rank",
        "is_first_rank",
        "is_local_master",
        "should_log",
        "is_logging_process",
        "is_master_ordinal",
        "should_save",  # Hugging Face TrainingArguments: true on the process that writes
        "is_last_rank",  # Megatron: one rank, like rank 0
    }
)
_RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "SLURM_PROCID", "SLURM_LOCALID", "NODE_RANK"})
# Calls that return this process's index besides `*rank()` (dist.get_rank(), hvd.rank(),
# hvd.local_rank(), mpu.get_data_parallel_rank()): torch_xla's and JAX's.
_RANK_CALLS = frozenset({"get_ordinal", "get_local_ordinal", "process_index"})


def classify(test: ast.expr, flags: Mapping[str, str] | None = None) -> str | None:
    """ZERO if the test holds only on rank 0, NONZERO if only off rank 0, None otherwise.

    `flags` are names assigned such a test earlier (`save_logs = args.logs and
    is_master(args)`), by dotted name."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return flip(classify(test.operand, flags))
    if isinstance(test, ast.BoolOp):
        kinds = {classify(value, flags) for value in test.values} - {None}
        return kinds.pop() if len(kinds) == 1 else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        held = _none_test(test, flags)
        if held is not None:
            return held
        return _classify_compare(test.left, test.ops[0], test.comparators[0])
    if is_main_process_predicate(test):
        return ZERO
    if flags:
        if isinstance(test, ast.Call):  # do_save(...) that returns False off rank 0
            text = dotted(test.func)
            return flags.get(f"{text}()") if text is not None else None
        text = dotted(test)
        return flags.get(text) if text is not None else None
    return None


def operand_guards(node: ast.BoolOp, flags: Mapping[str, str] | None = None) -> list[str | None]:
    """Per operand of `a and b and c` (or `a or b`), the rank it runs on: an operand runs only
    where the ones before it let it through (true for `and`, false for `or`), so the first
    rank test among them guards every later one (`is_master and print(...)`)."""
    found: list[str | None] = [None]
    for earlier in node.values[:-1]:
        polarity = found[-1]
        if polarity is None:
            polarity = classify(earlier, flags)
            polarity = flip(polarity) if isinstance(node.op, ast.Or) else polarity
        found.append(polarity)
    return found


def held_only_on(value: ast.expr, flags: Mapping[str, str] | None = None) -> str | None:
    """`SummaryWriter() if rank == 0 else None`: a value that is set (truthy) only on rank 0
    (ZERO) or only off it (NONZERO); the guard it holds is then tested as `writer is None`."""
    if not isinstance(value, ast.IfExp):
        return None
    polarity = classify(value.test, flags)
    if polarity is None:
        return None
    if _is_none(value.orelse) and not _is_none(value.body):
        return polarity
    if _is_none(value.body) and not _is_none(value.orelse):
        return flip(polarity)
    return None


def _none_test(test: ast.Compare, flags: Mapping[str, str] | None) -> str | None:
    """`writer is None` / `writer is not None` on a value held only on some ranks."""
    if not flags or not _is_none(test.comparators[0]):
        return None
    text = dotted(test.left)
    held = flags.get(text) if text is not None else None
    if held is None:
        return None
    op = test.ops[0]
    if isinstance(op, ast.IsNot):
        return held
    return flip(held) if isinstance(op, ast.Is) else None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def rank_zero_predicate(
    function: ast.FunctionDef | ast.AsyncFunctionDef, flags: Mapping[str, str]
) -> bool:
    """A function that starts with `if not is_master: return False`, or whose returns are all
    rank-0 tests or True (`if dist.is_initialized(): return dist.get_rank() % n == 0`, then
    `return True` without a group: SlowFast's is_master_proc): true only on rank 0."""
    if _returns_rank_zero_test(function, flags):
        return True
    for statement in function.body[:3]:
        if not isinstance(statement, ast.If) or len(statement.body) != 1:
            continue
        returned = statement.body[0]
        if (
            isinstance(returned, ast.Return)
            and isinstance(returned.value, ast.Constant)
            and returned.value.value is False
            and classify(statement.test, flags) == NONZERO
        ):
            return True
    return False


def _returns_rank_zero_test(
    function: ast.FunctionDef | ast.AsyncFunctionDef, flags: Mapping[str, str]
) -> bool:
    if len(function.body) > _PREDICATE_STATEMENTS:
        return False  # a predicate is a few lines; longer functions are not read for one
    returned = list(_returned_values(function.body))
    tests = [v for v in returned if not (isinstance(v, ast.Constant) and v.value is True)]
    return bool(tests) and None not in tests and all(classify(v, flags) == ZERO for v in tests)


_PREDICATE_STATEMENTS = 4


def _returned_values(body: list[ast.stmt]) -> Iterator[ast.expr | None]:
    """The values of the returns of a few statements, through if/else (not nested functions)."""
    for statement in body:
        if isinstance(statement, ast.Return):
            yield statement.value
        elif isinstance(statement, ast.If):
            yield from _returned_values(statement.body)
            yield from _returned_values(statement.orelse)


def flip(polarity: str | None) -> str | None:
    return _FLIPPED.get(polarity) if polarity else None


_FLIPPED = {ZERO: NONZERO, NONZERO: ZERO}


_MAIN_PROCESS_NAME = re.compile(
    r"(is_|am_)?(global_|local_|world_)?(rank_?(0|zero)|main(_process|_proc|_rank|_worker)?|master("
    r"_process|_proc|_rank|_worker)?|root_(proc(ess)?|worker|rank)|chief|leader|primary|first_rank|"
    r"rank0_process)"
    r"(_only)?"
)


def is_main_process_predicate(node: ast.AST) -> bool:
    """`is_main_process()`, `accelerator.is_main_process`, `self._is_rank_zero`, `master`."""
    name = last_identifier(node)
    return name is not None and _names_main_process(name)


@functools.lru_cache(maxsize=4096)  # asked of every test and flag: names repeat
def _names_main_process(name: str) -> bool:
    lowered = name.lower().lstrip("_")
    return lowered in _MAIN_PROCESS or _MAIN_PROCESS_NAME.fullmatch(lowered) is not None


def is_rank_like(node: ast.AST) -> bool:
    """`rank`, `args.local_rank`, `self.gpu_id`, `dist.get_rank()`, `hvd.rank()`,
    `xm.get_ordinal()`, `int(os.environ["RANK"])`."""
    if isinstance(node, ast.Call):
        name = last_identifier(node.func)
        if name in ("int", "str") and node.args:
            return is_rank_like(node.args[0])
        if name in ("get", "getenv") and node.args:
            return _is_rank_env_key(node.args[0])
        return name is not None and (name.endswith("rank") or name in _RANK_CALLS)
    if isinstance(node, ast.Subscript):
        return _is_rank_env_key(node.slice)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return is_rank_like(node.left)  # args.rank % ngpus_per_node
    name = last_identifier(node)
    if name is None:
        return False
    lowered = name.lower()
    return ("rank" in lowered and "world" not in lowered and not lowered.endswith("ranks")) or (
        lowered in _RANK_LIKE
    )


def _is_rank_env_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in _RANK_ENV


def _classify_compare(left: ast.expr, op: ast.cmpop, right: ast.expr) -> str | None:
    if is_rank_like(right) and not is_rank_like(left):
        left, right = right, left
        op = MIRRORED.get(type(op), op)
    if not is_rank_like(left):
        return None
    if isinstance(op, (ast.In, ast.NotIn)):
        values = _constants(right)
        if values is None or 0 not in values:
            return None
        return ZERO if isinstance(op, ast.In) else NONZERO
    value = signed_constant(right)
    if value is None:
        # `dist.get_rank() == world_size - 1`, `rank == src`: one rank only, like rank 0
        if (
            isinstance(op, ast.Eq)
            and not isinstance(right, ast.Constant)
            and not is_rank_like(right)
        ):
            return ZERO
        return None
    if isinstance(op, (ast.Eq, ast.Is)) and value == 0:
        return ZERO
    if isinstance(op, (ast.NotEq, ast.IsNot)) and value == 0:
        return NONZERO
    if (isinstance(op, ast.Gt) and value == 0) or (isinstance(op, ast.GtE) and value == 1):
        return NONZERO
    if (isinstance(op, ast.LtE) and value == 0) or (isinstance(op, ast.Lt) and value == 1):
        return ZERO
    return None


MIRRORED: dict[type, ast.cmpop] = {
    ast.Gt: ast.Lt(),
    ast.Lt: ast.Gt(),
    ast.GtE: ast.LtE(),
    ast.LtE: ast.GtE(),
}


def _int_constant(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Constant) and node.value == "0":
        return 0
    return None


def _constants(node: ast.AST) -> set[object] | None:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = {_int_constant(e) for e in node.elts}
        return values - {None} or None
    return None


def ends_control_flow(body: list[ast.stmt]) -> bool:
    """A branch that never falls through: `return`, `continue`, `raise`, `sys.exit()`."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Continue, ast.Raise)):
        return True
    return (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and last_identifier(last.value.func) in ("exit", "_exit")
    )


def signed_constant(node: ast.expr) -> int | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        operand = _int_constant(node.operand)
        return -operand if operand is not None else None
    return _int_constant(node)


def is_wrapper_test(test: ast.expr) -> bool:
    """`hasattr(model, "module")`, `isinstance(model, (DDP, DataParallel))`: true only for a
    wrapped model."""
    if not isinstance(test, ast.Call) or len(test.args) != 2:
        return False
    name = last_identifier(test.func)
    second = test.args[1]
    if name == "hasattr":
        return isinstance(second, ast.Constant) and second.value == "module"
    if name == "isinstance":
        kinds = second.elts if isinstance(second, ast.Tuple) else [second]
        return any(
            "DataParallel" in (last_identifier(k) or "") or (last_identifier(k) == "DDP")
            for k in kinds
        )
    return False
