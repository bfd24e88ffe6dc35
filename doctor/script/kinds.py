"""What a program's calls set up: RPC, data parallel, tensor parallel (for the per-rank
opinions, which mean nothing for RPC workers and must not split a tensor-parallel group)."""

from __future__ import annotations

import ast

from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, ScriptFacts

_RPC_INIT = "torch.distributed.rpc.init_rpc"
_DATA_PARALLEL_WRAPS = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.distributed.fsdp.",
    "torch.utils.data.DistributedSampler",
)
_TENSOR_PARALLEL = (
    "torch.distributed.tensor.parallel.",
    "torch.distributed.tensor.distribute_tensor",
    "torch.distributed._tensor.distribute_tensor",
)


def rpc_only(facts: ScriptFacts) -> bool:
    """An RPC program (workers, parameter servers, observers) with no data-parallel wrap: not
    one process per GPU doing the same work, so the per-rank opinions do not apply."""
    kinds = set().union(*(_call_kinds(f) for f in program_files(facts)))
    return "rpc" in kinds and "data-parallel" not in kinds


def uses_tensor_parallel(facts: ScriptFacts) -> bool:
    """parallelize_module or distribute_tensor in the program: ranks of one tensor-parallel
    group must draw the same random numbers."""
    return any("tensor-parallel" in _call_kinds(f) for f in program_files(facts))


_KIND_KEYS = (
    "init_rpc",
    "DistributedDataParallel",
    "FullyShardedDataParallel",
    "fully_shard",
    "DistributedSampler",
    "parallelize_module",
    "distribute_tensor",
    "ParallelismConfig",
)


def _call_kinds(facts: ScriptFacts) -> frozenset[str]:
    """What the file's calls set up: "rpc", "data-parallel", "tensor-parallel" (once per file)."""
    cached = facts.__dict__.get("_call_kinds")
    if cached is not None:
        return cached
    kinds: set[str] = set()
    if facts.is_python:
        for site in (s for key in _KIND_KEYS for s in facts.calls_by_key.get(key, ())):
            qualified = facts.resolve(site)
            if _accelerate_tensor_parallel(site, qualified):
                kinds.add("tensor-parallel")
            if qualified is None or not qualified.startswith("torch."):
                continue
            if qualified == _RPC_INIT:
                kinds.add("rpc")
            elif qualified.startswith(_DATA_PARALLEL_WRAPS):
                kinds.add("data-parallel")
            elif qualified.startswith(_TENSOR_PARALLEL):
                kinds.add("tensor-parallel")
    frozen = facts.__dict__["_call_kinds"] = frozenset(kinds)
    return frozen


def _accelerate_tensor_parallel(site: CallSite, qualified: str | None) -> bool:
    """accelerate's `ParallelismConfig(tp_size=...)` (not a literal 1): a tensor-parallel
    program, as parallelize_module is."""
    if qualified is None or not qualified.startswith("accelerate."):
        return False
    size = site.keyword("tp_size")
    return size is not None and not (isinstance(size, ast.Constant) and size.value == 1)
