"""`attach` on real gloo jobs that fault by themselves, started by plain torchrun or by a plain
launcher (never by the doctor; nothing is sent into a job once it started): a DataLoader worker
killed, mismatched collectives, a rank that died as a zombie or was reaped. What is true on
gloo/CPU under torch 2.13 (measured here, see README "What attach sees of a dead worker or
rank"): a killed worker makes its rank raise at once when its main thread runs Python, and a
dead rank makes its gloo peers raise "Connection closed by peer" within a second, so the
states that last, and that these jobs hold, are a dead worker under a rank blocked in a
collective, and survivors that wait outside gloo (init_process_group) for a dead rank."""

from __future__ import annotations

import sys
import time

import psutil
import pytest
from attach_jobs import FIXTURES, attach, free_port, line_of, running, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
WITHIN_S = 20.0


def _plain_launcher(*options: str) -> list[str]:
    return [sys.executable, str(FIXTURES / "launch_in_order.py"), *options, str(free_port())]


def test_killed_worker_under_a_rank_waiting_in_a_collective(tmp_path) -> None:
    with running("worker_killed.py", tmp_path) as job:
        job.wait_ready()
        worker = wait_for_status(job, psutil.STATUS_ZOMBIE)[0]
        before = job.snapshot()
        attached = attach(job.process.pid)
        assert attached.returncode == 1
        dead = attached.finding("DDP703")
        assert dead["evidence"]["rank"] == "rank 1"
        assert dead["evidence"]["workers"] == [worker.pid]
        assert dead["evidence"]["states"] == {str(worker.pid): "zombie"}
        hang = attached.finding("DDP302")
        assert hang["evidence"]["waiting"] == [1]
        step = line_of("_common.py", "model(batch).sum().backward()")
        assert hang["evidence"]["waiting_at"]["rank 1"].endswith(f"_common.py:{step}")
        evaluate = line_of("worker_killed.py", "time.sleep(3600)")
        assert f"worker_killed.py:{evaluate}" in hang["evidence"]["missing"]["rank 0"]
        assert hang["location"]["line"] == evaluate
        assert dead["location"]["path"].endswith("_common.py")  # rank 1's step, in backward
        assert attached.seconds < WITHIN_S
        assert job.process.poll() is None and job.snapshot() == before  # left as it was


def test_mismatched_collectives_name_both_ops_and_lines(tmp_path) -> None:
    with running("mismatch.py", tmp_path) as job:
        job.wait_ready()
        attached = attach(job.process.pid)
        assert attached.returncode == 1
        mismatch = attached.finding("DDP304")
        assert mismatch["evidence"]["calls"] == {"rank 0": "all_reduce", "rank 1": "broadcast"}
        where = mismatch["evidence"]["where"]
        assert where["rank 0"].endswith(f"mismatch.py:{line_of('mismatch.py', '# rank 0')}")
        assert where["rank 1"].endswith(f"mismatch.py:{line_of('mismatch.py', '# rank 1')}")
        assert "DDP302" not in attached.codes
        assert attached.seconds < WITHIN_S
        assert job.untouched()


def test_zombie_rank_the_other_waits_for(tmp_path) -> None:
    with running("rank_dies.py", tmp_path, launcher=_plain_launcher()) as job:
        job.wait_ready()
        zombie = wait_for_status(job, psutil.STATUS_ZOMBIE)[0]
        before = job.snapshot()
        attached = attach(job.process.pid)  # the launcher's pid: a plain job has no agent
        assert attached.returncode == 1
        dead = attached.finding("DDP307")
        assert dead["evidence"]["dead"] == ["rank 1"]
        assert dead["evidence"]["pids"] == {"rank 1": zombie.pid}
        assert dead["evidence"]["alive"] == [0]
        init = line_of("rank_dies.py", "dist.init_process_group(")
        assert dead["evidence"]["where"]["rank 0"].endswith(f"rank_dies.py:{init}")
        assert dead["location"]["line"] == init
        assert attached.facts["launcher"] == "env"
        assert attached.seconds < WITHIN_S
        assert job.process.poll() is None and job.snapshot() == before


def test_reaped_rank_of_a_one_host_job_is_named(tmp_path) -> None:
    with running("rank_dies.py", tmp_path, launcher=_plain_launcher("--reap")) as job:
        job.wait_ready()
        deadline = time.monotonic() + 30
        while len(job.ranks()) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)  # rank 1 reaped by the launcher
        attached = attach(job.ranks()[0].pid)
        assert attached.returncode == 1
        dead = attached.finding("DDP307")
        assert dead["evidence"]["dead"] == ["rank 1"]
        assert dead["evidence"]["alive"] == [0]
        init = line_of("rank_dies.py", "dist.init_process_group(")
        assert dead["location"]["line"] == init
        assert attached.seconds < WITHIN_S
        assert job.untouched()
