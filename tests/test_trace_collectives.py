"""Collective progress across ranks (a pure function), and faulthandler's dump read back."""

from __future__ import annotations

from ddp_doctor.facts.trace import Site
from ddp_doctor.trace.collectives import (
    COMPLETED,
    PENDING,
    CollectiveCall,
    find_mismatches,
    find_stall,
    normalise_dtype,
    normalise_op,
)
from ddp_doctor.trace.stacks import main_frames, threads, user_site, waiting_in


def call(seq: int, op: str = "all_reduce", state: str = COMPLETED, **kw: object) -> CollectiveCall:
    return CollectiveCall(seq, op, state=state, **kw)  # type: ignore[arg-type]


def test_ranks_in_step_have_no_mismatch_and_no_stall() -> None:
    ranks = {r: (call(1, shapes=((4,),)), call(2, "barrier")) for r in range(4)}
    assert find_mismatches(ranks) == [] and find_stall(ranks) is None


def test_a_shape_mismatch_at_one_sequence_number() -> None:
    ranks = {0: (call(1, shapes=((4,),)),), 1: (call(1, shapes=((8,),)),)}
    (mismatch,) = find_mismatches(ranks)
    assert (mismatch.group, mismatch.seq, sorted(mismatch.calls)) == ("0", 1, [0, 1])


def test_shapes_of_all_to_all_and_object_calls_may_differ() -> None:
    ranks = {
        0: (call(1, "all_to_all_single", shapes=((4,),)), call(2, "all_gather_object")),
        1: (call(1, "all_to_all_single", shapes=((6,),)), call(2, "all_gather_object")),
    }
    assert find_mismatches(ranks) == []


def test_groups_are_compared_apart() -> None:
    ranks = {
        0: (call(1, group="0"), call(1, "broadcast", group="1")),
        1: (call(1, group="0"), call(1, "broadcast", group="1")),
    }
    assert find_mismatches(ranks) == []


def test_collective_under_a_rank_guard_two_ranks() -> None:
    """Rank 0 waits in the extra all_reduce, rank 1 in the barrier after it."""
    ranks = {
        0: (call(1), call(2, state=PENDING)),
        1: (call(1), call(2, "barrier", state=PENDING)),
    }
    stall = find_stall(ranks)
    assert stall is not None
    assert (stall.call.op, stall.call.seq, stall.waiting) == ("all_reduce", 2, (0,))
    assert stall.elsewhere == {1: call(2, "barrier", state=PENDING)}
    assert [m.seq for m in find_mismatches(ranks)] == [2]


def test_the_odd_rank_out_is_named_with_more_ranks() -> None:
    ranks = {r: (call(1), call(2, "barrier", state=PENDING)) for r in range(1, 4)}
    ranks[0] = (call(1), call(2, state=PENDING))
    stall = find_stall(ranks)
    assert stall is not None and stall.waiting == (0,) and sorted(stall.elsewhere) == [1, 2, 3]


def test_a_rank_that_never_came_is_elsewhere_with_nothing_pending() -> None:
    ranks = {
        0: (call(1), call(2, state=PENDING)),
        1: (call(1), call(2, state=PENDING)),
        2: (call(1),),
    }
    stall = find_stall(ranks)
    assert stall is not None and stall.waiting == (0, 1) and stall.elsewhere == {2: None}


def test_ranks_waiting_in_init_and_one_that_never_called_it() -> None:
    init = CollectiveCall(0, "init_process_group", state=PENDING)
    stall = find_stall({0: (init,), 1: ()})
    assert (
        stall is not None and stall.call.op == "init_process_group" and stall.elsewhere == {1: None}
    )


def test_flight_recorder_names() -> None:
    assert normalise_op("gloo:all_reduce") == "all_reduce"
    assert normalise_op("nccl:_allgather_base") == "_allgather_base"
    assert normalise_dtype("Float") == "float32" and normalise_dtype("BFloat16") == "bfloat16"
    assert call(1, shapes=((2, 3),), dtypes=("float32",)).describe() == "all_reduce [2x3] float32"


DUMP = """\
Thread 0x00007f9ce1bd46c0 (most recent call first):
  File "/venv/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f9ce2a20b80 (most recent call first):
  File "/venv/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/payload/ddp_doctor_patient/trace_patches.py", line 200 in collective
  File "/venv/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "fixtures/trace/hang.py", line 15 in main
  File "fixtures/trace/hang.py", line 21 in <module>
  File "<frozen runpy>", line 88 in _run_code
"""
NOT_USER = {
    "library": ["/venv/site-packages/torch/", "/payload/ddp_doctor_patient/"],
    "stdlib": ["/venv/lib/python3.11/"],
}


def test_faulthandler_dump_read_back() -> None:
    dumped = threads(DUMP)
    assert sorted(dumped) == [0x7F9CE1BD46C0, 0x7F9CE2A20B80]
    frames = main_frames(DUMP, 0x7F9CE2A20B80)
    assert frames[0] == Site(
        "/venv/site-packages/torch/distributed/distributed_c10d.py", 3252, "all_reduce"
    )
    assert user_site(frames, NOT_USER) == Site("fixtures/trace/hang.py", 15, "main")
    assert waiting_in(frames, NOT_USER) == "collective"


def test_a_rank_computing_in_its_own_code_is_not_waiting() -> None:
    frames = (Site("train.py", 40, "evaluate"), Site("train.py", 60, "main"))
    assert waiting_in(frames, NOT_USER) is None
    backward = (Site("/venv/site-packages/torch/autograd/graph.py", 824, "_engine_run_backward"),)
    assert waiting_in(backward + frames, NOT_USER) == "backward"


def test_site_packages_below_a_system_stdlib_are_the_users() -> None:
    frames = (Site("/venv/lib/python3.11/site-packages/lightning/fit.py", 5, "fit"),)
    assert user_site(frames, NOT_USER) == frames[0]
