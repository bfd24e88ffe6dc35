"""`attach` on real gloo jobs started by plain torchrun or mp.spawn: each case's verdict with
the ranks' lines, within 20 s, and the job still running afterwards, untouched."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import psutil
import pytest
from attach_jobs import BIN, FIXTURES, as_nobody, attach, line_of, running, wait_for_status
from simulated_hosts import simulated_hosts, why_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
WITHIN_S = 20.0
TWO_NODE_PORT = "29533"


def test_rank_blocked_in_dataset_while_rank0_waits_in_allreduce(tmp_path) -> None:
    with running("dataset_blocks.py", tmp_path) as job:
        job.wait_ready()
        attached = attach(job.process.pid)
        assert attached.returncode == 1, attached.stderr
        assert "DDP302" in attached.codes
        hang = attached.finding("DDP302")
        assert hang["evidence"]["waiting"] == [0]
        assert list(hang["evidence"]["missing"]) == ["rank 1"]
        sleep = line_of("dataset_blocks.py", "time.sleep(3600)")
        assert f"dataset_blocks.py:{sleep}" in hang["evidence"]["missing"]["rank 1"]
        assert hang["location"]["line"] == sleep
        step = line_of("_common.py", "model(batch).sum().backward()")
        assert hang["evidence"]["waiting_at"]["rank 0"].endswith(f"_common.py:{step}")
        assert all(r["store"] for r in attached.facts["ranks"])  # each rank's store socket
        assert attached.seconds < WITHIN_S
        assert job.untouched()


def test_barrier_only_rank0_reaches_while_rank1_polls(tmp_path) -> None:
    with running("barrier_poll.py", tmp_path) as job:
        job.wait_ready()
        attached = attach(job.process.pid)
        assert attached.returncode == 1
        hang = attached.finding("DDP302")
        assert hang["evidence"]["collective"] == "barrier"
        assert hang["evidence"]["waiting"] == [0]
        poll = line_of("barrier_poll.py", "time.sleep(0.05)")
        assert f"barrier_poll.py:{poll}" in hang["evidence"]["missing"]["rank 1"]
        barrier = line_of("barrier_poll.py", "    dist.barrier()")
        assert hang["evidence"]["waiting_at"]["rank 0"].endswith(f"barrier_poll.py:{barrier}")
        assert attached.seconds < WITHIN_S
        assert job.untouched()


def test_healthy_job_progresses(tmp_path) -> None:
    with running("healthy.py", tmp_path) as job:
        job.wait_ready()
        attached = attach(job.process.pid)
        assert attached.returncode == 0, attached.report["findings"]
        assert not {"DDP302", "DDP304", "DDP307", "DDP702"} & set(attached.codes)
        progress = attached.finding("DDP706")["evidence"]
        assert progress["counter"] == "train:number" and progress["rank"] == 0
        assert progress["steps_per_s"] > 0 and progress["rose"] > 0
        assert attached.seconds < WITHIN_S
        assert job.untouched()


def test_straggler_is_named(tmp_path) -> None:
    with running("straggler.py", tmp_path) as job:
        job.wait_ready()
        attached = attach(job.process.pid, "--samples", "4", "--interval", "1")
        assert "DDP302" not in attached.codes
        assert attached.finding("DDP704")["evidence"]["rank"] == "rank 1"
        sleep = line_of("straggler.py", "time.sleep(0.3)")
        assert attached.finding("DDP704")["location"]["line"] == sleep
        assert attached.finding("DDP706")["evidence"]["steps_per_s"] is None  # a top-level loop
        step = line_of("_common.py", "model(batch).sum().backward()")
        waiting_at = attached.finding("DDP704")["evidence"]["waiting_at"]["rank 0"]
        assert waiting_at.endswith(f"_common.py:{step}")
        assert attached.seconds < WITHIN_S
        assert job.untouched()


def test_mp_spawn_job(tmp_path) -> None:
    port = str(_free_port())
    launcher = [os.path.join(os.path.dirname(os.sys.executable), "python")]
    with running("spawn_hang.py", tmp_path, launcher=launcher, args=[port]) as job:
        job.wait_ready()
        attached = attach(job.process.pid)
        assert attached.facts["launcher"] == "mp.spawn"
        hang = attached.finding("DDP302")
        assert hang["evidence"]["waiting"] == [0]
        sleep = line_of("spawn_hang.py", "time.sleep(3600)")
        assert f"spawn_hang.py:{sleep}" in hang["evidence"]["missing"]["rank 1"]
        reduce = line_of("spawn_hang.py", "dist.all_reduce(")
        assert hang["evidence"]["waiting_at"]["rank 0"].endswith(f"spawn_hang.py:{reduce}")
        assert job.untouched()


def test_stopped_dataloader_worker(tmp_path) -> None:
    with running("worker_stopped.py", tmp_path) as job:
        job.wait_ready()  # rank 1's worker stops itself: nothing is sent into the job
        workers = wait_for_status(job, psutil.STATUS_STOPPED)
        time.sleep(1)  # rank 1 steps on the batches already fetched, then waits for its worker
        attached = attach(job.process.pid)
        assert attached.finding("DDP703")["evidence"]["workers"] == [w.pid for w in workers]
        assert attached.seconds < WITHIN_S
        assert "DDP302" in attached.codes
        assert attached.finding("DDP302")["evidence"]["waiting"] == [0]
        stop = line_of("worker_stopped.py", "for number, batch in enumerate(loader)")
        assert attached.finding("DDP703")["location"]["line"] == stop


def test_ptrace_refused_is_a_finding_with_proc_view(tmp_path) -> None:
    if sys.version_info[:2] != (3, 11) or not os.path.exists("/usr/bin/python3.11"):
        pytest.skip("the nobody job runs the system Python 3.11 with this environment's torch")
    packages = Path(sysconfig.get_paths()["purelib"])
    if not _others_can_read(packages):
        pytest.skip(f"user nobody cannot read this environment's packages ({packages})")
    no_ptrace = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    os.chmod(tmp_path, 0o777)
    with running("dataset_blocks.py", tmp_path, **as_nobody()) as job:
        job.wait_ready()
        attached = attach(job.process.pid, prefix=no_ptrace)
        blind = attached.finding("DDP701")
        assert sorted(blind["evidence"]["ranks"]) == [0, 1]
        assert blind["evidence"]["users"] == ["nobody"]
        assert "SYS_PTRACE" in blind["fix"]["text"]
        ranks = attached.facts["ranks"]
        assert all(s["state"] and s["cpu_s"] is not None for r in ranks for s in r["samples"])
        assert job.untouched()


def _others_can_read(folder: Path) -> bool:
    """Whether a user other than the owner can reach `folder` (a clone made in a private
    temporary folder, as `mktemp -d` makes it, keeps its virtualenv from them)."""
    for part in (folder, *folder.parents):
        mode = part.stat().st_mode
        if not mode & stat.S_IXOTH or (part == folder and not mode & stat.S_IROTH):
            return False
    return True


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_nothing_of_the_doctor_left_running(tmp_path) -> None:
    with running("barrier_poll.py", tmp_path) as job:
        job.wait_ready()
        pids = {str(p.pid) for p in job.ranks()}
        attach(job.process.pid)
        spies = [p for p in psutil.process_iter(["name", "cmdline"]) if p.info["name"] == "py-spy"]
        assert not [p for p in spies if pids & set(p.info["cmdline"] or ())]
        assert job.untouched()


@pytest.mark.skipif(why_unavailable() is not None, reason=str(why_unavailable()))
def test_two_nodes_attached_each_and_merged_with_diagnose(tmp_path) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    env = {**os.environ, "ATTACH_READY_DIR": str(ready), "PYTHONPATH": str(FIXTURES)}
    with simulated_hosts(2) as hosts:
        for node in range(2):
            hosts.write_hosts_file(node)
        agents = [
            subprocess.Popen(
                hosts.command(node, [str(BIN / "torchrun"), "--nnodes", "2", "--node-rank",
                                     str(node), "--nproc-per-node", "1", "--master-addr",
                                     "node0", "--master-port", TWO_NODE_PORT,
                                     str(FIXTURES / "node_stuck.py")]),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            )
            for node in range(2)
        ]  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(list(ready.iterdir())) == 2, "the two-node job did not start"
            paths = []
            for node, agent in enumerate(agents):
                argv = [sys.executable, "-m", "ddp_doctor", "attach", str(agent.pid), "--format",
                        "json", "--interval", "2"]  # fmt: skip
                done = hosts.run_in(node, argv, timeout=60)
                assert done.returncode == 1, done.stderr
                paths.append(tmp_path / f"node{node}.json")
                paths[-1].write_text(done.stdout)
            assert all(agent.poll() is None for agent in agents)  # still running, untouched
            merged = subprocess.run(
                [sys.executable, "-m", "ddp_doctor", "diagnose", *map(str, paths), "--format",
                 "json"], capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        finally:
            for agent in agents:
                agent.kill()
    report = json.loads(merged.stdout)
    hang = next(f for f in report["findings"] if f["code"] == "DDP302")
    assert hang["evidence"]["waiting"] == [0]
    assert list(hang["evidence"]["missing"]) == ["rank 1"]
    assert "node1" in hang["message"]
    assert hang["location"]["line"] == line_of("node_stuck.py", "time.sleep(3600)")
