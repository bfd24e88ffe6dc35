"""The one table of collectives (patient/collectives.py) against torch itself, and what its
readers make of it: the wrappers' numbering of a pending call, the flight recorder's names."""

from __future__ import annotations

import inspect

import pytest

from ddp_doctor.facts.collectives import COMPLETED, PENDING, CollectiveCall
from ddp_doctor.patient.collectives import GROUP_COLLECTIVES, TABLE, op_name, recorded
from ddp_doctor.probes.trace.calls import flight_recorder_calls, numbered_as_recorded
from ddp_doctor.registry import spec_for
from ddp_doctor.script.analyze import analyze
from ddp_doctor.script.files import PYTHON

NOT_FUNCTIONS = {"coalesced"}  # the flight recorder's name for a batch, no function of its own


def test_every_row_is_a_function_of_torch_distributed_with_that_parameter() -> None:
    dist = pytest.importorskip("torch.distributed")
    for row in TABLE:
        if row.name in NOT_FUNCTIONS:
            continue
        function = getattr(dist, row.name)
        if row.argument is not None:
            assert row.argument in inspect.signature(function).parameters, row


@pytest.mark.parametrize("name", ["all_reduce", "reduce_scatter_single", "all_gather_single"])
def test_check_finds_every_collective_of_the_table_under_a_rank_guard(name: str) -> None:
    """check's op list is the table's: the torch 2.13 names (*_single) count as well."""
    source = (
        "import torch.distributed as dist\n"
        "def step(rank, out, t):\n"
        "    dist.init_process_group('gloo')\n"
        "    if rank == 0:\n"
        f"        dist.{name}(out, t)\n"
    )
    found = analyze("step.py", source, PYTHON, [spec_for("DDP120")])
    assert [(f.code, f.location.line if f.location else None) for f in found] == [("DDP120", 5)]
    assert name in GROUP_COLLECTIVES


@pytest.mark.parametrize(
    ("profiling_name", "backend", "op"),
    [
        ("gloo:all_reduce", "gloo", "all_reduce"),
        ("nccl:_allgather_base", "nccl", "all_gather_into_tensor"),
        ("nccl:_reduce_scatter_base", "nccl", "reduce_scatter_tensor"),
        ("nccl:all_reduce_barrier", "nccl", "barrier"),
        ("gloo:all_to_all", "gloo", "all_to_all"),
        ("nccl:send 0->1", "nccl", "send"),
    ],
)
def test_flight_recorder_names_read_as_torch_names(
    profiling_name: str, backend: str, op: str
) -> None:
    assert recorded(profiling_name)[0] == backend and op_name(profiling_name) == op


def entry(seq: int, name: str, retired: bool = True) -> dict[str, object]:
    return {
        "collective_seq_id": seq,
        "profiling_name": f"gloo:{name}",
        "process_group": ["0", "default_pg"],
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "state": "scheduled",
        "retired": retired,
    }


def test_a_waiting_ranks_last_open_entry_is_its_pending_one() -> None:
    entries = [
        entry(4, "all_reduce", retired=False),
        entry(5, "broadcast"),
        entry(6, "barrier", False),
    ]
    calls = flight_recorder_calls(entries, waiting=True)
    assert [(c.seq, c.op, c.state) for c in calls] == [
        (4, "all_reduce", COMPLETED),
        (5, "broadcast", COMPLETED),
        (6, "barrier", PENDING),
    ]
    assert calls[0].dtypes == ("float32",) and calls[0].group_desc == "default_pg"
    assert all(c.state == COMPLETED for c in flight_recorder_calls(entries, waiting=False))


def test_the_pending_wrapped_call_takes_the_flight_recorders_number() -> None:
    """The wrappers counted 2 calls of the script; the recorder also counted DDP's own."""
    recorded_calls = flight_recorder_calls(
        [entry(5, "all_reduce"), entry(6, "barrier", False)], True
    )
    barrier = CollectiveCall(2, "barrier", state=PENDING, where="train.py:20")
    assert numbered_as_recorded(barrier, recorded_calls) == CollectiveCall(
        6, "barrier", state=PENDING, where="train.py:20"
    )
    other = CollectiveCall(2, "broadcast", state=PENDING)
    assert numbered_as_recorded(other, recorded_calls) == other  # not what the recorder waits in
    scatter = CollectiveCall(2, "reduce_scatter_tensor", state=PENDING)  # gloo runs an all_reduce
    open_all_reduce = flight_recorder_calls([entry(9, "all_reduce", False)], True)
    assert numbered_as_recorded(scatter, open_all_reduce).seq == 9
