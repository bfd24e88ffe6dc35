"""The step rate of a progressing job: py-spy's --locals reduced to the main thread's integer
step counters, and the rate from their rise between samples (absent, with why, where none is
visible)."""

from __future__ import annotations

from ddp_doctor.attach.rate import step_rate
from ddp_doctor.facts.attach import AttachedRank, AttachFacts, LoopCounter, RankSample, ThreadStack
from ddp_doctor.facts.trace import Site
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.attach.stacks import main_counters

LIB = "/venv/lib/python3.11/site-packages/torch/optim/sgd.py"


def _dump(*frames: tuple[str, str, dict[str, str]], thread: str = "MainThread") -> list[dict]:
    return [
        {
            "thread_name": thread,
            "frames": [
                {
                    "filename": path,
                    "name": function,
                    "line": 1,
                    "locals": [{"name": n, "repr": r} for n, r in local.items()],
                }
                for path, function, local in frames
            ],
        }
    ]


def test_only_integer_step_counters_of_the_main_thread_are_kept() -> None:
    data = _dump(
        ("/a/train.py", "train", {"step": "41", "token": "'hf_secret'", "lr": "0.1", "i": "3"}),
        ("/a/train.py", "main", {"epoch": "2", "batch_idx": "7", "model": "<Module at 0x1>"}),
    )
    kept = {(c.function, c.name): c.value for c in main_counters(data)}
    assert kept == {("train", "step"): 41, ("train", "i"): 3, ("main", "batch_idx"): 7}
    assert main_counters(_dump(("/a/t.py", "f", {"step": "1"}), thread="Thread-1")) == (
        LoopCounter("/a/t.py", "f", "step", 1),
    )  # no thread named MainThread: the first thread
    assert main_counters({"not": "a list"}) == ()


def _sample(at: float, *counters: LoopCounter) -> RankSample:
    thread = ThreadStack(1, "MainThread", False, (Site("/a/train.py", 9, "train"),))
    return RankSample(at, "running", 1.0, None, at, 100 * int(at), (thread,), counters=counters)


def _counter(value: int, name: str = "step", path: str = "/a/train.py") -> LoopCounter:
    return LoopCounter(path, "train", name, value)


def test_rate_from_a_counter_that_rose() -> None:
    rate = step_rate([(0, (_sample(0.0, _counter(100)), _sample(2.0, _counter(112))))])
    assert (rate.per_s, rate.rank, rate.counter, rate.rose) == (6.0, 0, "train:step", 12)


def test_a_step_name_wins_over_an_index_and_library_counters_are_not_the_users() -> None:
    first = _sample(0.0, _counter(5, "i"), _counter(10), _counter(1, "n_iter", LIB))
    last = _sample(2.0, _counter(9, "i"), _counter(12), _counter(900, "n_iter", LIB))
    assert step_rate([(0, (first, last))]).counter == "train:step"


def test_no_rate_says_why() -> None:
    none_at_all = step_rate([(0, (_sample(0.0), _sample(2.0)))])
    assert none_at_all.per_s is None and "top level" in none_at_all.why
    reset = step_rate([(0, (_sample(0.0, _counter(50)), _sample(2.0, _counter(3))))])
    assert reset.per_s is None and "train:step" in reset.why  # a new epoch began: no rate
    once = step_rate([(0, (_sample(0.0, _counter(1)),))])
    assert once.per_s is None and "two samples" in once.why


def test_ddp706_carries_the_rate_of_a_progressing_job() -> None:
    ranks = tuple(
        AttachedRank(
            pid=100 + r,
            rank=r,
            host="h",
            world_size=2,
            samples=(_sample(0.0, _counter(10)), _sample(2.0, _counter(30))),
        )
        for r in range(2)
    )
    facts = AttachFacts("h", "job", "torchrun", interval_s=2.0, sample_count=2, ranks=ranks)
    found = judge([ProbeResult("attach", ProbeStatus.OK, facts, 0.0)])
    progress = next(f for f in found if f.code == "DDP706")
    assert progress.evidence["steps_per_s"] == 10.0 and progress.evidence["rank"] == 0
    assert not [f.code for f in found if f.code in ("DDP302", "DDP702", "DDP704")]


def test_stacks_are_read_without_locals_where_reading_them_fails(tmp_path) -> None:
    from ddp_doctor.probes.attach import stacks

    fake = tmp_path / "py-spy"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--locals*) echo "Error: Failed to copy PyCodeObject" >&2; exit 1;; esac\n'
        'echo \'[{"thread_name": "MainThread", "frames": [{"filename": "/a/t.py", "line": 3, '
        '"name": "f"}]}]\'\n'
    )
    fake.chmod(0o755)
    found = stacks.dump(str(fake), 1, 5.0)
    assert found.error is None and found.threads[0].frames == (Site("/a/t.py", 3, "f"),)
    assert found.counters == ()


def test_one_sample_claims_no_progress() -> None:
    rank = AttachedRank(pid=100, rank=0, host="h", world_size=1, samples=(_sample(0.0),))
    facts = AttachFacts("h", "job", "torchrun", interval_s=2.0, sample_count=1, ranks=(rank,))
    found = judge([ProbeResult("attach", ProbeStatus.OK, facts, 0.0)])
    assert "DDP706" not in [f.code for f in found]


def test_the_pace_of_collectives_in_a_fresh_dump(tmp_path) -> None:
    import json
    from pathlib import Path

    from ddp_doctor.facts.attach import RecorderPace
    from ddp_doctor.probes.attach.recorder_pace import recent_pace

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "attach" / "flight_recorder"
    assert recent_pace(fixture / "rank0.json") == RecorderPace("0", 4, 0.019)
    entries = [
        {"collective_seq_id": n, "time_created_ns": n * 250_000_000, "process_group": ["3", "tp"]}
        for n in range(1, 6)
    ]
    entries.append({"collective_seq_id": 9, "time_created_ns": 9 * 10**9, "is_p2p": True})
    dump = tmp_path / "dump_0"
    dump.write_text(json.dumps({"entries": entries}))
    assert recent_pace(dump) == RecorderPace("3", 4, 1.0)  # no default group: the last one's
    dump.write_text("{not json")
    assert recent_pace(dump) is None and recent_pace(tmp_path / "absent") is None


def test_rate_from_the_flight_recorder_where_no_counter_is_visible() -> None:
    from ddp_doctor.facts.attach import RecorderPace

    samples = (_sample(0.0), _sample(2.0))
    rate = step_rate([(0, samples), (1, samples)], [(1, RecorderPace("0", 40, 2.0)), (0, None)])
    assert rate.per_s is None and rate.collectives_per_s == 20.0 and rate.rank == 1
    assert "collectives/s" in rate.describe()
    counted = step_rate([(0, (_sample(0.0, _counter(1)), _sample(2.0, _counter(5))))],
                        [(0, RecorderPace("0", 40, 2.0))])  # fmt: skip
    assert counted.per_s == 2.0 and counted.collectives_per_s is None  # steps come first
