"""The one collective analysis over per-rank records (a pure function), the table's names for
what the flight recorder writes, and faulthandler's dump read back."""

from __future__ import annotations

from ddp_doctor.facts.collectives import (
    COMPLETED,
    PENDING,
    CollectiveCall,
    RankCollectives,
)
from ddp_doctor.facts.trace import (
    Forensics,
    InitRecord,
    RankSnapshot,
    RankTrace,
    Site,
    TraceFacts,
)
from ddp_doctor.patient.collectives import dtype_name, op_name
from ddp_doctor.readings.collective_progress import (
    CollectiveProgress,
    Position,
    Stall,
    collective_progress,
)
from ddp_doctor.rules.trace_hang import call_lists
from ddp_doctor.trace.stacks import main_frames, threads, user_site, waiting_in


def call(seq: int, op: str = "all_reduce", state: str = COMPLETED, **kw: object) -> CollectiveCall:
    return CollectiveCall(seq, op, state=state, **kw)  # type: ignore[arg-type]


def progress(ranks: dict[int, tuple[CollectiveCall, ...]]) -> CollectiveProgress:
    return collective_progress([RankCollectives(rank, calls) for rank, calls in ranks.items()])


def the_stall(ranks: dict[int, tuple[CollectiveCall, ...]]) -> Stall:
    (stall,) = progress(ranks).stalls
    return stall


def test_ranks_in_step_have_no_mismatch_and_no_stall() -> None:
    found = progress({r: (call(1, shapes=((4,),)), call(2, "barrier")) for r in range(4)})
    assert found.mismatches == [] and found.stalls == []


def test_a_shape_mismatch_at_one_sequence_number() -> None:
    ranks = {0: (call(1, shapes=((4,),)),), 1: (call(1, shapes=((8,),)),)}
    (mismatch,) = progress(ranks).mismatches
    assert (mismatch.group, mismatch.seq, sorted(mismatch.calls)) == ("0", 1, [0, 1])
    assert mismatch.differs == ("input sizes",)


def test_shapes_of_all_to_all_and_object_calls_may_differ() -> None:
    ranks = {
        0: (call(1, "all_to_all_single", shapes=((4,),)), call(2, "all_gather_object")),
        1: (call(1, "all_to_all_single", shapes=((6,),)), call(2, "all_gather_object")),
    }
    assert progress(ranks).mismatches == []


def test_groups_are_compared_apart() -> None:
    ranks = {
        0: (call(1, group="0"), call(1, "broadcast", group="1")),
        1: (call(1, group="0"), call(1, "broadcast", group="1")),
    }
    assert progress(ranks).mismatches == []


def test_collective_under_a_rank_guard_two_ranks() -> None:
    """Rank 0 waits in the extra all_reduce, rank 1 in the barrier after it."""
    barrier = call(2, "barrier", state=PENDING)
    stall = the_stall({0: (call(1), call(2, state=PENDING)), 1: (call(1), barrier)})
    assert (stall.call.op, stall.seq, stall.waiting) == ("all_reduce", 2, (0,))
    assert stall.elsewhere == {1: Position(at=barrier, pending=barrier, last=call(1))}
    ranks = {0: (call(1), call(2, state=PENDING)), 1: (call(1), barrier)}
    assert [m.seq for m in progress(ranks).mismatches] == [2]


def test_the_odd_rank_out_is_named_with_more_ranks() -> None:
    ranks = {r: (call(1), call(2, "barrier", state=PENDING)) for r in range(1, 4)}
    ranks[0] = (call(1), call(2, state=PENDING))
    stall = the_stall(ranks)
    assert stall.waiting == (0,) and sorted(stall.elsewhere) == [1, 2, 3]


def test_a_rank_that_never_came_is_elsewhere_with_nothing_pending() -> None:
    ranks = {
        0: (call(1), call(2, state=PENDING)),
        1: (call(1), call(2, state=PENDING)),
        2: (call(1),),
    }
    stall = the_stall(ranks)
    assert stall.waiting == (0, 1) and stall.elsewhere == {2: Position(None, None, call(1))}


def test_ranks_waiting_in_init_and_one_that_never_called_it() -> None:
    init = CollectiveCall(0, "init_process_group", state=PENDING)
    stall = the_stall({0: (init,), 1: ()})
    assert stall.call.op == "init_process_group" and stall.elsewhere == {
        1: Position(None, None, None)
    }


def test_every_rank_in_one_unfinished_call_is_not_completed() -> None:
    stall = the_stall({r: (call(1), call(2, state=PENDING)) for r in range(3)})
    assert (stall.kind, stall.waiting, stall.elsewhere) == ("not-completed", (0, 1, 2), {})


def test_a_rank_whose_records_start_later_is_not_missing_earlier_ones() -> None:
    """The ring buffer: rank 1 kept only 6..10; it is not named for 2..5, nor for a gap."""
    ranks = {
        0: (*(call(s) for s in range(1, 11)), call(11, state=PENDING)),
        1: (*(call(s) for s in (6, 7, 9, 10)), call(11, state=PENDING)),
    }
    found = progress(ranks)
    assert found.mismatches == []
    assert (found.groups[0].window_start, found.stalls[0].kind) == (6, "not-completed")


def test_ranks_in_one_op_with_other_shapes_reached_it_the_mismatch_says_why() -> None:
    """All ranks entered the all_reduce, none finished: with other shapes that is DDP304's
    mismatch, not a stall of its own; a different op at the same number is both."""
    shapes = {r: (call(1), call(2, state=PENDING, shapes=((4 * (r + 1),),))) for r in (0, 1)}
    found = progress(shapes)
    assert [m.seq for m in found.mismatches] == [2] and found.stalls == []
    ops = {0: (call(1), call(2, state=PENDING)), 1: (call(1), call(2, "barrier", state=PENDING))}
    found = progress(ops)
    assert [m.seq for m in found.mismatches] == [2]
    assert [(s.seq, s.kind) for s in found.stalls] == [(2, "never-reached")]


def test_flight_recorder_names() -> None:
    assert op_name("gloo:all_reduce") == "all_reduce"
    assert op_name("nccl:_allgather_base") == "all_gather_into_tensor"
    assert op_name("nccl:all_reduce_barrier") == "barrier"
    assert dtype_name("Float") == "float32" and dtype_name("BFloat16") == "bfloat16"
    assert dtype_name("torch.int64") == "int64"
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


def test_without_every_ranks_flight_recorder_the_wrappers_count_stays_one_numbering() -> None:
    """A snapshot numbers the pending call as the flight recorder does (6); where the analysis
    falls back to the wrappers' records (rank 1 has no recorder entries), the call is matched
    by what it is and keeps the wrappers' count (2): one numbering per analysis."""
    first, guarded = call(1, where="t.py:13"), call(2, where="t.py:15")
    barrier = call(2, "barrier", where="t.py:16")
    init = InitRecord(ok=True)
    ranks = (
        RankTrace(0, 10, init=init, collectives_first=(first, guarded)),
        RankTrace(1, 11, init=init, collectives_first=(first, barrier)),
    )
    fr = (call(5), call(6, state=PENDING))
    snapshots = (
        RankSnapshot(
            0,
            True,
            waiting="collective",
            pending=call(6, state=PENDING, where="t.py:15"),
            flight_recorder=fr,
        ),
        RankSnapshot(
            1,
            True,
            waiting="collective",
            pending=call(2, "barrier", state=PENDING, where="t.py:16"),
        ),
    )
    facts = TraceFacts(
        "torchrun t.py", "torchrun", ranks=ranks, forensics=Forensics("hang", 9.0, 4.0, snapshots)
    )
    lists = call_lists(facts)
    assert [(c.seq, c.state) for c in lists[0]] == [(1, COMPLETED), (2, PENDING)]
    assert [(c.seq, c.state) for c in lists[1]] == [(1, COMPLETED), (2, PENDING)]


def test_a_rank_whose_first_record_is_the_odd_call_has_no_last_one() -> None:
    stall = the_stall({0: (call(1, state=PENDING),), 1: (call(1, "barrier", state=PENDING),)})
    assert stall.elsewhere[1].last is None and stall.elsewhere[1].at is not None


def test_many_groups_cost_what_their_records_cost() -> None:
    """Every call in a group of its own (a crafted dump): one pass, no groups x calls."""
    calls = tuple(call(1, group=f"g{n}") for n in range(3000))
    assert len(progress({0: calls, 1: calls}).groups) == 3000
