"""The collectives of torch.distributed, in one table: what trace's wrappers patch and record,
what `check` looks for in a script, and how torch's flight recorder names each of them.

Standard library only: the trace's wrappers run inside the user's Python, and the doctor imports
the same table (ddp_doctor.patient.collectives), so the three readers never disagree.

Sources: torch 2.13's torch/distributed/distributed_c10d.py for the functions and their
parameters; the flight recorder's profiling names from ProcessGroupNCCL.cpp and
ProcessGroupGloo.cpp (pytorch/pytorch), and from dumps of real gloo jobs here (torch 2.13.0+cpu:
all_gather_into_tensor is recorded as gloo:all_gather, reduce_scatter_tensor as gloo:all_reduce,
all_to_all_single as gloo:all_to_all); NCCL runs barrier as an all-reduce named
"nccl:all_reduce_barrier" (pytorch/pytorch test_c10d_nccl.py, flight-recorder tests).
"""

from __future__ import annotations

from dataclasses import dataclass

INPUT, OUTPUT = "input", "output"


@dataclass(frozen=True)
class Collective:
    name: str  # the function of torch.distributed
    argument: str | None  # the parameter whose tensors the trace records
    agree: bool  # those tensors have one shape and dtype on every rank in correct code
    point_to_point: bool = False  # between two ranks, numbered apart (p2p_seq_id)
    # The flight recorder's op names for it, without "nccl:"/"gloo:". A name several rows list
    # (gloo records reduce_scatter_tensor as all_reduce) is read as the first row's.
    recorded_as: tuple[str, ...] = ()
    # Which of a flight-recorder entry's sizes agree on every rank: a gather's output list and a
    # scatter's input list exist only on the root; None: none need to (all_to_all).
    recorded_sizes: str | None = INPUT


TABLE: tuple[Collective, ...] = (
    Collective("all_reduce", "tensor", True, recorded_as=("all_reduce", "allreduce")),
    Collective(
        "all_reduce_coalesced",
        "tensors",
        True,
        recorded_as=("allreduce_coalesced", "all_reduce_coalesced"),
    ),
    Collective("broadcast", "tensor", True, recorded_as=("broadcast", "_broadcast_oop")),
    Collective("reduce", "tensor", True, recorded_as=("reduce", "_reduce_oop")),
    Collective("all_gather", "tensor", True, recorded_as=("all_gather", "allgather")),
    Collective(
        "all_gather_into_tensor",
        "input_tensor",
        True,
        recorded_as=(
            "_allgather_base",
            "_all_gather_base",
            "allgather_into_tensor_coalesced",
            "all_gather_into_tensor_coalesced",
            "all_gather",
        ),
    ),
    Collective("all_gather_single", "input_tensor", True, recorded_as=("_allgather_base",)),
    Collective("reduce_scatter", "input_list", True, recorded_as=("reduce_scatter",)),
    Collective(
        "reduce_scatter_tensor",
        "input",
        True,
        recorded_as=("_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "all_reduce"),
    ),
    Collective("reduce_scatter_single", "input", True, recorded_as=("_reduce_scatter_base",)),
    Collective(
        "all_to_all",
        "input_tensor_list",
        False,
        recorded_as=("all_to_all", "alltoall"),
        recorded_sizes=None,
    ),
    Collective(
        "all_to_all_single",
        "input",
        False,
        recorded_as=("all_to_all_base", "alltoall_base", "all_to_all"),
        recorded_sizes=None,
    ),
    # gather's `tensor` is every rank's input; scatter's `tensor` is every rank's output.
    Collective("gather", "tensor", True, recorded_as=("gather",)),
    Collective("scatter", "tensor", True, recorded_as=("scatter",), recorded_sizes=OUTPUT),
    Collective("barrier", None, True, recorded_as=("barrier", "all_reduce_barrier")),
    Collective("monitored_barrier", None, True),
    # The *_object calls send pickled bytes through the collectives they are built on.
    Collective("all_gather_object", None, False, recorded_as=("all_gather",)),
    Collective("broadcast_object_list", None, False, recorded_as=("broadcast",)),
    Collective("gather_object", None, False, recorded_as=("all_gather", "gather")),
    Collective("scatter_object_list", None, False, recorded_as=("broadcast", "scatter")),
    Collective("send", "tensor", False, True, ("send",), None),
    Collective("recv", "tensor", False, True, ("recv", "recv_any_source"), None),
    Collective("isend", "tensor", False, True),
    Collective("irecv", "tensor", False, True),
    Collective("batch_isend_irecv", None, False, True),
    # Not a function: NCCL's record of the ops batched under one coalescing manager.
    Collective("coalesced", None, False, recorded_as=("coalesced",), recorded_sizes=None),
)
BY_NAME = {collective.name: collective for collective in TABLE}
# The functions trace wraps and `check` follows: the collectives every rank of a group calls.
GROUP_COLLECTIVES = tuple(c.name for c in TABLE if not c.point_to_point and c.name != "coalesced")
_BY_RECORDED = {}
for _collective in TABLE:
    for _recorded in _collective.recorded_as:
        _BY_RECORDED.setdefault(_recorded, _collective)

# The flight recorder writes c10 scalar type names; the trace and users write torch's.
DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Bool": "bool",
    "ComplexHalf": "complex32",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "QInt8": "qint8",
    "QUInt8": "quint8",
    "QInt32": "qint32",
}


def recorded(profiling_name: str) -> tuple[str, Collective | None]:
    """'nccl:all_reduce' -> ('nccl', all_reduce's row); ('', None) parts when unknown. A point-
    to-point name carries its peers ('nccl:send 0->1'): the first word is the op."""
    backend, _, op = profiling_name.strip().rpartition(":")
    op = op.split(" ", 1)[0]
    return backend, _BY_RECORDED.get(op) or BY_NAME.get(op)


def op_name(profiling_name: str) -> str:
    """The torch.distributed name of a recorded op ('nccl:_allgather_base' ->
    'all_gather_into_tensor'); an op the table does not know keeps its own name."""
    _, collective = recorded(profiling_name)
    if collective is not None:
        return collective.name
    return profiling_name.rpartition(":")[2].split(" ", 1)[0] or profiling_name


def recorded_ops(name: str) -> frozenset[str]:
    """The torch.distributed names a call of `name` can appear as in the flight recorder."""
    collective = BY_NAME.get(name)
    found = {name}
    if collective is not None:
        found |= {op_name(recorded) for recorded in collective.recorded_as}
    return frozenset(found)


def dtype_name(name: str) -> str:
    """'Float' (the flight recorder) and 'torch.float32' (str of a dtype) -> 'float32'."""
    return DTYPES.get(name, name.removeprefix("torch."))
