"""attach's pure parts on made-up processes and samples: finding jobs and ranks in a process
table, py-spy's output and refusals, places in a stack, and the verdicts the real jobs do not
cover (mismatched collectives, a zombie rank, every rank stuck outside collectives)."""

from __future__ import annotations

import os

import pytest

from ddp_doctor.attach.places import BACKWARD, COLLECTIVE, DATA, KERNEL, place_of
from ddp_doctor.attach.verdict import DEAD, MISMATCHED, STUCK, verdict_of
from ddp_doctor.facts.attach import (
    AttachedRank,
    AttachFacts,
    ChildProcess,
    RankSample,
    ThreadStack,
)
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.trace import Site
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.attach import stacks
from ddp_doctor.probes.attach.collect import AttachError, AttachRequest, choose_job
from ddp_doctor.probes.attach.processes import Candidate, find_jobs, job_for

PY = "/venv/bin/python"
SITE = "/venv/lib/python3.11/site-packages/torch"


def _rank_env(rank: int, run: str = "run-a") -> dict[str, str]:
    return {
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_RANK": str(rank),
        "TORCHELASTIC_RUN_ID": run,
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
    }


def _table(*candidates: Candidate) -> dict[int, Candidate]:
    return {c.pid: c for c in candidates}


def test_torchrun_agent_workers_and_dataloader_worker() -> None:
    agent = Candidate(10, 1, f"{PY} /venv/bin/torchrun --nproc-per-node 2 train.py", "u")
    rank0 = Candidate(11, 10, f"{PY} -u train.py", "u", _rank_env(0))
    rank1 = Candidate(12, 10, f"{PY} -u train.py", "u", _rank_env(1))
    worker = Candidate(13, 12, f"{PY} -u train.py", "u", _rank_env(1))  # forked: same env
    jobs = find_jobs(_table(agent, rank0, rank1, worker))
    assert [(j.job_id, j.launcher) for j in jobs] == [("run-a", "torchrun")]
    assert [(r.process.pid, r.rank) for r in jobs[0].ranks] == [(11, 0), (12, 1)]
    assert job_for(jobs, "12") is jobs[0] and job_for(jobs, "10") is jobs[0]
    assert job_for(jobs, "99") is None


def test_mp_spawn_children_are_ranks_in_spawn_order() -> None:
    spawn = f"{PY} -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"
    parent = Candidate(20, 1, f"{PY} train.py", "u")
    first, second = Candidate(22, 20, spawn, "u"), Candidate(21, 20, spawn, "u")
    worker = Candidate(23, 21, spawn, "u")
    jobs = find_jobs(_table(parent, first, second, worker))
    assert [(j.job_id, j.launcher) for j in jobs] == [("pid 20", "mp.spawn")]
    assert [(r.process.pid, r.rank, r.rank_from) for r in jobs[0].ranks] == [
        (21, 0, "spawn order"),
        (22, 1, "spawn order"),
    ]


def test_slurm_tasks_and_plain_env_ranks() -> None:
    slurm = {"SLURM_PROCID": "3", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "0"}
    task = Candidate(30, 2, f"{PY} train.py", "u", slurm)
    plain = Candidate(
        31,
        2,
        f"{PY} train.py",
        "u",
        {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
    )
    jobs = {j.job_id: j for j in find_jobs(_table(task, plain))}
    assert jobs["slurm 77"].launcher == "slurm" and jobs["slurm 77"].ranks[0].rank == 3
    assert jobs["h:1"].launcher == "env"


def test_several_jobs_need_a_choice_and_none_is_one_line() -> None:
    a = Candidate(11, 1, f"{PY} train.py", "u", _rank_env(0, "run-a"))
    b = Candidate(12, 1, f"{PY} train.py", "u", _rank_env(0, "run-b"))
    jobs = find_jobs(_table(a, b))
    with pytest.raises(AttachError, match="2 jobs on this host, choose one with --job"):
        choose_job(AttachRequest(), jobs)
    assert choose_job(AttachRequest(target="run-b"), jobs).job_id == "run-b"
    with pytest.raises(AttachError, match="no distributed training job"):
        choose_job(AttachRequest(), [])


def test_py_spy_json_and_refusal() -> None:
    dumped = stacks.parse_dump(
        [
            {
                "os_thread_id": 5,
                "thread_name": "MainThread",
                "active": False,
                "frames": [{"name": "f", "filename": "/a/train.py", "line": 3}],
            }
        ]
    )
    assert dumped[0].idle and dumped[0].frames == (Site("/a/train.py", 3, "f"),)
    refusal = (
        "Error: Failed to get process executable name. Check that the process is "
        "running.\n\nCaused by:\n    0: Permission denied (os error 13)\n"
    )
    failed = stacks._failed(refusal)
    assert failed.refused and "Permission denied" in (failed.error or "")
    with pytest.raises(ValueError):
        stacks.parse_dump({"not": "a list"})


def _sample(
    at: float,
    frames: tuple[Site, ...],
    state: str = "sleeping",
    idle: bool = True,
    children: tuple[ChildProcess, ...] = (),
) -> RankSample:
    thread = ThreadStack(1, "MainThread", idle, frames)
    return RankSample(at, state, 1.0, "futex_wait_queue", 0.5, 10, (thread,), None, children)


def _rank(rank: int, *samples: RankSample) -> AttachedRank:
    return AttachedRank(pid=100 + rank, rank=rank, host="h", world_size=2, samples=samples)


def _facts(*ranks: AttachedRank) -> AttachFacts:
    return AttachFacts("h", "job", "torchrun", interval_s=2.0, sample_count=2, ranks=ranks)


def _in(op: str, line: int) -> tuple[Site, ...]:
    return (Site(f"{SITE}/distributed/distributed_c10d.py", 10, op), Site("/a/train.py", line, "m"))


def test_places_from_stacks() -> None:
    backward = (
        Site(f"{SITE}/autograd/graph.py", 9, "_engine_run_backward"),
        Site("/a/train.py", 7, "<module>"),
    )
    data = (
        Site("/a/data.py", 88, "__getitem__"),
        Site(f"{SITE}/utils/data/fetch.py", 5, "f"),
        Site("/a/train.py", 6, "<module>"),
    )
    assert place_of(_sample(0, _in("barrier", 4))).kind == COLLECTIVE
    assert place_of(_sample(0, _in("barrier", 4))).op == "barrier"
    assert place_of(_sample(0, backward)).kind == BACKWARD
    loading = place_of(_sample(0, data))
    assert loading.kind == DATA and str(loading.site) == "/a/data.py:88"
    assert place_of(RankSample(0, "disk-sleep", wchan="nfs_wait")).kind == KERNEL


def test_ranks_stuck_in_different_collectives_are_a_mismatch() -> None:
    facts = _facts(
        _rank(0, _sample(0, _in("all_reduce", 4)), _sample(2, _in("all_reduce", 4))),
        _rank(1, _sample(0, _in("barrier", 9)), _sample(2, _in("barrier", 9))),
    )
    assert verdict_of(facts).kind == MISMATCHED
    codes = [f.code for f in judge([ProbeResult("attach", ProbeStatus.OK, facts, 0.0)])]
    assert "DDP304" in codes and "DDP302" not in codes


def test_a_zombie_rank_is_dead_and_the_others_wait() -> None:
    facts = _facts(
        _rank(0, _sample(0, _in("all_reduce", 4)), _sample(2, _in("all_reduce", 4))),
        _rank(1, RankSample(0, "zombie"), RankSample(2, "zombie")),
    )
    assert verdict_of(facts).kind == DEAD
    found = judge([ProbeResult("attach", ProbeStatus.OK, facts, 0.0)])
    dead = next(f for f in found if f.code == "DDP307")
    assert dead.evidence["dead"] == ["rank 1"] and dead.evidence["alive"] == [0]


def test_every_rank_stuck_outside_collectives() -> None:
    wait = (Site("/a/train.py", 30, "wait_for_file"),)
    facts = _facts(
        _rank(0, _sample(0, wait), _sample(2, wait)), _rank(1, _sample(0, wait), _sample(2, wait))
    )
    assert verdict_of(facts).kind == STUCK
    found = judge([ProbeResult("attach", ProbeStatus.OK, facts, 0.0)])
    assert [f.code for f in found if f.code.startswith("DDP7")] == ["DDP702"]


def test_no_attach_facts_no_attach_findings() -> None:
    assert FactSet.of([]).attach is None
    assert not [f.code for f in judge([]) if f.code.startswith("DDP7")]


def test_cli_without_a_job_is_one_line_exit_2(invoke, monkeypatch) -> None:
    from ddp_doctor.probes.attach import collect

    monkeypatch.setattr(collect, "scan", lambda: {})
    result = invoke("attach")
    assert result.exit_code == 2
    assert "no distributed training job found" in result.output


def test_cli_pid_and_job_contradict(invoke) -> None:
    assert invoke("attach", "123", "--job", "x").exit_code == 2
    assert invoke("attach", "--interval", "20", "--timeout", "10").exit_code == 2


def _node_report(path, rank: AttachedRank, host: str) -> None:
    import json
    from dataclasses import replace

    from ddp_doctor.model import make_report
    from ddp_doctor.report_io import report_to_json

    facts = replace(_facts(replace(rank, host=host)), hostname=host)
    report = make_report([ProbeResult("attach", ProbeStatus.OK, facts, 1.0)], [])
    path.write_text(json.dumps(report_to_json(report), indent=1, default=str) + "\n")


def _two_nodes(tmp_path) -> list:
    own = (Site("/a/train.py", 41, "save_checkpoint"),)
    _node_report(
        tmp_path / "n0.json",
        _rank(0, _sample(0, _in("all_reduce", 4)), _sample(2, _in("all_reduce", 4))),
        "node0",
    )
    _node_report(tmp_path / "n1.json", _rank(1, _sample(0, own), _sample(2, own)), "node1")
    return [tmp_path / "n0.json", tmp_path / "n1.json"]


def test_diagnose_merges_node_reports_and_names_the_lagging_node(invoke, tmp_path) -> None:
    import json

    paths = _two_nodes(tmp_path)
    result = invoke("diagnose", *map(str, paths), "--format", "json")
    assert result.exit_code == 1, result.output
    hang = next(f for f in json.loads(result.output)["findings"] if f["code"] == "DDP302")
    assert hang["evidence"]["waiting"] == [0] and list(hang["evidence"]["missing"]) == ["rank 1"]
    assert "rank 1 on node1" in hang["message"] and hang["location"]["line"] == 41
    twice = tmp_path / "again.json"
    _node_report(twice, _rank(0, _sample(0, _in("all_reduce", 4))), "node7")
    clash = invoke("diagnose", str(paths[0]), str(twice))
    assert clash.exit_code == 2 and "same rank" in clash.output
    not_attach = tmp_path / "run.json"
    not_attach.write_text('{"schema_version": 1, "probes": [], "findings": []}')
    assert invoke("diagnose", str(paths[0]), str(not_attach)).exit_code == 2


def test_slurm_job_runs_one_attach_per_node_through_srun(invoke, tmp_path, monkeypatch) -> None:
    import json

    paths = _two_nodes(tmp_path)
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/args\n'
        f"sed 's/^/0: /' {paths[0]}\n"
        f"sed 's/^/1: /' {paths[1]}\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    result = invoke("attach", "--slurm-job", "1234", "--format", "json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["probes"][0]["facts"]["nodes"] == ["node0", "node1"]
    assert "DDP302" in [f["code"] for f in report["findings"]]
    args = (tmp_path / "args").read_text()
    for word in ("--overlap", "--jobid=1234", "--ntasks-per-node=1", "--label", "slurm 1234"):
        assert word in args


def test_accelerate_and_deepspeed_launchers() -> None:
    accelerate = Candidate(40, 1, f"{PY} /venv/bin/accelerate launch --num_processes 2 t.py", "u")
    deepspeed = Candidate(50, 1, f"{PY} -u -m deepspeed.launcher.launch --world_info=x t.py", "u")
    table = _table(
        accelerate,
        Candidate(41, 40, f"{PY} t.py", "u", _rank_env(0, "acc")),
        deepspeed,
        Candidate(51, 50, f"{PY} -u t.py --local_rank=0", "u", _rank_env(0, "ds")),
    )
    launchers = {j.job_id: j.launcher for j in find_jobs(table)}
    assert launchers == {"acc": "accelerate", "ds": "deepspeed"}


def test_job_text_cannot_reach_the_terminal_as_control_sequences() -> None:
    from ddp_doctor.codec import to_jsonable
    from ddp_doctor.render.attach_table import render_attach_text

    evil = (Site("/a/\x1b[2Jtrain```.py", 3, "f\x07"),)
    facts = _facts(_rank(0, _sample(0, evil), _sample(2, evil)))
    text = render_attach_text(to_jsonable(facts))
    assert "\x1b" not in text and "\x07" not in text and "```" not in text


def test_debug_server_ports_never_include_a_ranks_own_listeners(monkeypatch) -> None:
    from ddp_doctor.probes.attach import debug_server

    class Child:
        pid = 2

        def cmdline(self) -> list[str]:
            return ["python", "train.py"]  # a fork: the rank's own command line

    class Rank(Child):
        pid = 1

        def __init__(self, pid: int) -> None:
            pass

        def children(self) -> list[Child]:
            return [Child()]

    listening = {1: {29500, 41000}, 2: {29500, 41000, 25999}}  # the fork inherited 29500, 41000
    monkeypatch.setattr(debug_server.psutil, "Process", Rank)
    monkeypatch.setattr(debug_server, "_listening", lambda pid: listening[pid])
    assert debug_server.frontend_ports([1]) == [25999]


def test_a_straggler_caught_once_in_its_own_all_reduce_is_still_named() -> None:
    """Rank 1 sleeps between steps; one of four samples caught it in its short all-reduce,
    and one caught rank 0 between two all-reduces: the pattern holds in most samples."""
    sleeping = (Site("/a/train.py", 9, "<module>"),)
    waiting = [_in("all_reduce", 12)] * 4
    waiting[2] = (Site("/a/train.py", 11, "<module>"),)
    straggler = [sleeping, sleeping, _in("all_reduce", 12), sleeping]
    rank0 = _rank(0, *(_sample(t, f, idle=False) for t, f in enumerate(waiting)))
    rank1 = _rank(1, *(_sample(t, f, idle=False) for t, f in enumerate(straggler)))
    verdict = verdict_of(_facts(rank0, rank1))
    assert verdict.busy == (1,)
    view = verdict.view(1)
    assert str((view.mostly(waiting=False) or view.last).site) == "/a/train.py:9"
    # with two samples, both must show it
    two = verdict_of(_facts(_rank(0, *rank0.samples[1:3]), _rank(1, *rank1.samples[1:3])))
    assert two.busy == ()
