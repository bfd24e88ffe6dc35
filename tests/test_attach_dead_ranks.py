"""A dead rank as attach finds it in a process table and judges it: a zombie beside the job's
ranks (no environment left, its rank inferred only where one is missing), a rank of a one-host
job that no process has, and processes that only look like a launcher."""

from __future__ import annotations

from dataclasses import replace

from ddp_doctor.attach.verdict import DEAD, HUNG, verdict_of
from ddp_doctor.facts.attach import AttachedRank, AttachFacts, RankSample, ThreadStack
from ddp_doctor.facts.trace import Site
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.attach.processes import Candidate, find_jobs, job_for

PY = "/venv/bin/python"
SITE = "/venv/lib/python3.11/site-packages/torch"
INIT = (
    Site(f"{SITE}/distributed/rendezvous.py", 199, "_create_c10d_store"),
    Site("/a/train.py", 13, "<module>"),
)
ALL_REDUCE = (
    Site(f"{SITE}/distributed/distributed_c10d.py", 10, "all_reduce"),
    Site("/a/train.py", 20, "<module>"),
)


def _plain(pid: int, ppid: int, rank: int, world: int = 2) -> Candidate:
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1"}
    return Candidate(pid, ppid, f"{PY} train.py", "u", {**env, "MASTER_PORT": "29500"})


def _zombie(pid: int, ppid: int, name: str = "python") -> Candidate:
    return Candidate(pid, ppid, f"[{name}]", "u", {}, False, True)


def _table(*candidates: Candidate) -> dict[int, Candidate]:
    return {c.pid: c for c in candidates}


def test_a_zombie_beside_plain_ranks_is_the_missing_rank() -> None:
    launcher = Candidate(10, 5, f"{PY} launch.py", "u")
    jobs = find_jobs(_table(launcher, _plain(11, 10, 0), _zombie(12, 10)))
    assert len(jobs) == 1
    assert [(r.process.pid, r.rank) for r in jobs[0].ranks] == [(11, 0), (12, 1)]
    assert jobs[0].ranks[1].rank_from == "the one rank of the world not running"
    assert job_for(jobs, "10") is jobs[0]  # the launcher of a plain job names it


def test_zombies_whose_rank_cannot_be_told_stay_unnumbered() -> None:
    launcher = Candidate(10, 5, f"{PY} launch.py", "u")
    table = _table(launcher, _plain(11, 10, 0, world=4), _zombie(12, 10), _zombie(13, 10))
    ranks = find_jobs(table)[0].ranks
    assert [(r.process.pid, r.rank) for r in ranks] == [(11, 0), (12, None), (13, None)]


def test_zombies_that_are_not_the_jobs_are_left_out() -> None:
    agent = Candidate(10, 1, f"{PY} /venv/bin/torchrun --nproc-per-node 2 t.py", "u")
    env = {"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r"}
    rank0 = Candidate(11, 10, f"{PY} -u t.py", "u", env)
    table = _table(
        agent,
        rank0,
        _zombie(12, 11, "pt_data_worker"),  # the rank's own worker: DDP703's, not a rank
        _zombie(13, 1),  # init's, which reaps
        _zombie(14, 10, "bash"),  # not Python
    )
    assert [r.process.pid for r in find_jobs(table)[0].ranks] == [11]


def test_a_wrapper_around_torchrun_is_not_an_agent() -> None:
    wrapper = Candidate(9, 1, "timeout 60 /venv/bin/torchrun --nproc-per-node 1 t.py", "u")
    agent = Candidate(10, 9, f"{PY} /venv/bin/torchrun --nproc-per-node 1 t.py", "u")
    rank0 = Candidate(
        11, 10, f"{PY} -u t.py", "u", {"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "r"}
    )
    jobs = find_jobs(_table(wrapper, agent, rank0))
    assert [(j.job_id, j.agent.pid if j.agent else None) for j in jobs] == [("r", 10)]


def _sample(at: float, frames: tuple[Site, ...], switches: int = 10) -> RankSample:
    thread = ThreadStack(1, "MainThread", True, frames)
    return RankSample(at, "sleeping", 1.0, "futex_wait_queue", 0.5, switches, (thread,))


def _alone(frames: tuple[Site, ...], master: str = "127.0.0.1", busy: bool = False) -> AttachFacts:
    switches = 900 if busy else 10  # init_process_group's store client polls
    rank0 = AttachedRank(
        pid=101,
        rank=0,
        host="h",
        world_size=2,
        master_addr=master,
        samples=(_sample(0, frames), _sample(2, frames, switches)),
    )
    return AttachFacts("h", "job", "env", interval_s=2.0, sample_count=2, ranks=(rank0,))


def _codes(facts: AttachFacts) -> dict[str, dict]:
    found = judge([ProbeResult("attach", ProbeStatus.OK, facts, 0.0)])
    return {f.code: f.evidence for f in found}


def test_a_rank_no_process_has_on_a_one_host_job_is_dead() -> None:
    facts = _alone(INIT, busy=True)
    verdict = verdict_of(facts)
    assert (verdict.kind, verdict.gone, verdict.waiting) == (DEAD, (1,), (0,))
    evidence = _codes(facts)["DDP307"]
    assert evidence["dead"] == ["rank 1"] and evidence["alive"] == [0]
    assert evidence["where"]["rank 0"].endswith("/a/train.py:13")


def test_a_missing_rank_of_a_job_on_several_hosts_is_elsewhere_not_dead() -> None:
    facts = _alone(ALL_REDUCE, master="node0")
    verdict = verdict_of(facts)
    assert verdict.kind == HUNG and verdict.absent == (1,) and not verdict.gone
    assert "DDP307" not in _codes(facts)


def test_torchrun_local_world_size_tells_a_one_node_job() -> None:
    facts = _alone(ALL_REDUCE, master="node0")
    rank0 = replace(facts.ranks[0], env={"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"})
    facts = replace(facts, ranks=(rank0,))
    assert verdict_of(facts).gone == (1,)


def test_a_zombie_rank_names_where_the_others_wait() -> None:
    rank0 = _alone(ALL_REDUCE).ranks[0]
    zombie = AttachedRank(
        pid=102,
        rank=1,
        rank_from="the one rank of the world not running",
        host="h",
        samples=(RankSample(0, "zombie"), RankSample(2, "zombie")),
    )
    facts = AttachFacts("h", "job", "env", interval_s=2.0, sample_count=2, ranks=(rank0, zombie))
    evidence = _codes(facts)["DDP307"]
    assert evidence["pids"] == {"rank 1": 102}
    assert evidence["where"]["rank 0"] == "waits in all_reduce at /a/train.py:20"


def test_a_launcher_with_no_rank_running_is_one_line_exit_2(invoke, monkeypatch) -> None:
    from ddp_doctor.probes.attach import collect

    agent = Candidate(10, 1, f"{PY} /venv/bin/torchrun --nproc-per-node 2 t.py", "u")
    monkeypatch.setattr(collect, "scan", lambda: _table(agent))
    result = invoke("attach", "10")
    assert result.exit_code == 2
    assert "no rank running" in result.output and "Traceback" not in result.output


def test_ranks_standing_in_init_for_ranks_of_other_nodes_are_a_hang_not_progress() -> None:
    facts = _alone(INIT, master="node0", busy=True)  # the store client polls: not quiet
    verdict = verdict_of(facts)
    assert verdict.kind == HUNG and verdict.op == "init_process_group"
    assert verdict.absent == (1,) and not verdict.gone
    codes = _codes(facts)
    assert "DDP302" in codes and "DDP706" not in codes


def test_an_orphaned_dataloader_worker_is_not_taken_for_its_dead_rank() -> None:
    launcher = Candidate(10, 5, f"{PY} launch.py", "u")
    orphan = replace(_plain(13, 1, 1), name="pt_data_worker")  # its rank died: now init's
    jobs = find_jobs(_table(launcher, _plain(11, 10, 0), orphan))
    assert [r.process.pid for r in jobs[0].ranks] == [11]


def test_a_pid_above_the_agent_names_its_job() -> None:
    from ddp_doctor.probes.attach.collect import AttachRequest, choose_job

    wrapper = Candidate(9, 1, "timeout 60 /venv/bin/torchrun --nproc-per-node 1 t.py", "u")
    agent = Candidate(10, 9, f"{PY} /venv/bin/torchrun --nproc-per-node 1 t.py", "u")
    env = {"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "r"}
    table = _table(wrapper, agent, Candidate(11, 10, f"{PY} -u t.py", "u", env))
    jobs = find_jobs(table)
    assert choose_job(AttachRequest(target="9"), jobs, table).job_id == "r"
