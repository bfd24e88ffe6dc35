"""Every fault the job must name, reproduced with real 2-rank gloo jobs on this CPU machine.

Each test asserts the finding's code and facts, and that the run ended within --timeout + 5 s.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import FakeGpu, FakeNvml, job_fault

from ddp_doctor import cli
from ddp_doctor.probes.job.launch import JobConfig, preflight, run_job

pytestmark = pytest.mark.slow  # real jobs, subprocess runs or wheel builds

FAST = ["--sizes", "1K:64K:8", "--iters", "2"]
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def doctor_run(runner: CliRunner, *args: str, fault: str | None = None) -> tuple[dict, int, float]:
    started = time.monotonic()
    with job_fault(fault):
        result = runner.invoke(
            cli.cli, ["run", "--format", "json", "--timeout", str(TIMEOUT_S), *FAST, *args]
        )
    elapsed = time.monotonic() - started
    assert "Traceback" not in result.stderr  # the job's own output may hold torch tracebacks
    return json.loads(result.stdout), result.exit_code, elapsed


def findings(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def job_of(report: dict) -> dict:
    return next(p for p in report["probes"] if p["probe"] == "job")["facts"]


def test_healthy_job_reaches_every_stage(runner: CliRunner) -> None:
    report, code, _ = doctor_run(runner)
    job = job_of(report)
    assert code == 0 and job["exit_code"] == 0 and job["backend"] == "gloo"
    for rank in job["ranks"]:
        assert [s["stage"] for s in rank["stages"] if s["ok"]] == [
            "init",
            "identity",
            "allreduce",
            "ddp",
            "bandwidth",
            "memory",
        ]
    assert [row["size_bytes"] for row in job["bandwidth"]] == [1024, 8192, 65536]
    row = job["bandwidth"][-1]
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (2 - 1) / 2, rel=1e-3)
    assert {i["rank"] for i in job["identities"]} == {0, 1}
    assert all(i["cpu_affinity"] for i in job["identities"])  # sched_getaffinity, read in the rank
    assert not [f for f in report["findings"] if f["severity"] != "info"]
    # gloo on CPU: the bandwidth table says there is no expectation, and DDP303 stays silent.
    (table,) = report["bandwidth"]
    assert table["op"] == "all_reduce" and table["expected_gbps"] is None
    assert table["basis"].startswith("no expectation") and "gloo" in table["basis"]
    assert all(row["percent_of_expected"] is None for row in table["rows"])
    assert not findings(report, "DDP303")


def test_links_are_sampled_while_the_bandwidth_stage_runs(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With (fake) NVIDIA GPUs beside a gloo job, the parent reads the PCIe links during the
    job's bandwidth stage; the ranks ran on CPUs, so the readings are not judged. The sweep is
    long enough (about a second of gloo all-reduces) that the wait loop's 50 ms poll sees the
    stage on a loaded machine too."""
    gpus = [FakeGpu(bus_id=f"00000000:{bus}:00.0") for bus in ("18", "2A")]
    fake = FakeNvml(gpus=gpus, under_load=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    report, _, _ = doctor_run(runner, "--sizes", "4M:16M:4", "--iters", "20", "--backend", "gloo")
    topology = next(p for p in report["probes"] if p["probe"] == "topology")["facts"]
    assert topology["under_load"].startswith("sampled"), topology["under_load"]
    assert all(gpu["pcie_under_load"]["gen"] == 4 for gpu in topology["gpus"])
    assert report["bandwidth"][0]["expected_gbps"] is None  # gloo: no expectation
    assert not findings(report, "DDP320") and not findings(report, "DDP303")


def test_every_collective_is_swept_with_its_bus_factor() -> None:
    """--ops with all five collectives on gloo; the parent sees rank 0 reach the bandwidth
    stage (what the PCIe sampler hooks onto). 60 iterations per size and collective keep the
    stage longer than the wait loop's 50 ms poll on a loaded CI machine (with 2 it once
    started and ended between two polls)."""
    from ddp_doctor.patient.bandwidth import OPS, bus_factor

    seen: list[str | None] = []
    config = JobConfig(nproc=2, sizes="4K:64K:16", iters=60, timeout_s=90, ops=OPS)
    job = run_job(config, preflight(config), watcher=seen.append)
    assert job.exit_code == 0 and not job.bandwidth_errors
    assert "bandwidth" in seen
    assert [row.op for row in job.bandwidth] == [op for op in OPS for _ in range(2)]
    for row in job.bandwidth:
        expected = row.algbw_gbps * bus_factor(2, row.op)
        assert row.busbw_gbps == pytest.approx(expected, rel=1e-3, abs=1e-4)  # 4 decimals
        assert row.size_bytes in (4096, 65536)  # divisible by 2 ranks x 4 bytes: not rounded


def test_port_taken_by_another_listener_is_ddp201_before_launch(runner: CliRunner) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        report, code, elapsed = doctor_run(runner, "--master-port", str(port))
    assert code == 1 and elapsed < TIMEOUT_S + 5
    assert findings(report, "DDP201")[0]["evidence"]["port"] == port
    assert job_of(report)["launched"] is False


def test_port_taken_on_another_local_address_is_ddp201_too(runner: CliRunner) -> None:
    """torchrun's store listens on every interface: a port busy anywhere is busy for it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.2", 0))
        listener.listen()
        port = listener.getsockname()[1]
        report, code, _ = doctor_run(runner, "--master-port", str(port))
    assert code == 1 and findings(report, "DDP201")
    assert job_of(report)["launched"] is False


def test_unresolvable_master_is_ddp203_before_launch(runner: CliRunner) -> None:
    report, code, elapsed = doctor_run(runner, "--master-addr", "no-such-host.invalid")
    assert code == 1 and elapsed < TIMEOUT_S + 5
    assert findings(report, "DDP203")
    assert job_of(report)["launched"] is False


def test_nccl_backend_without_nccl_is_ddp005_before_launch(runner: CliRunner) -> None:
    report, code, _ = doctor_run(runner, "--backend", "nccl")
    assert code == 1
    assert findings(report, "DDP005")[0]["severity"] == "error"
    assert job_of(report)["launched"] is False


def test_rank_that_never_joins_is_ddp202_naming_it(runner: CliRunner) -> None:
    report, code, elapsed = doctor_run(runner, fault="1:init:stall")
    assert code == 1 and elapsed < TIMEOUT_S + 5
    (finding,) = findings(report, "DDP202")
    assert finding["evidence"]["missing_ranks"] == [1]
    assert not findings(report, "DDP307")  # rank 0's timeout is a consequence, not a crash


@pytest.mark.parametrize(
    ("fault", "stage", "exit_code"),
    [
        ("1:allreduce:crash", "allreduce", 1),
        ("1:ddp:kill", "ddp", -9),
        ("0:identity:exit", "identity", 7),
    ],
)
def test_rank_that_dies_is_ddp307_with_stage_and_exit(
    runner: CliRunner, fault: str, stage: str, exit_code: int
) -> None:
    report, code, elapsed = doctor_run(runner, fault=fault)
    assert code == 1 and elapsed < TIMEOUT_S + 5
    (finding,) = findings(report, "DDP307")
    assert finding["evidence"]["rank"] == int(fault[0])
    assert finding["evidence"]["stage"] == stage
    assert finding["evidence"]["exit_code"] == exit_code
    assert not findings(report, "DDP302")  # the peers only waited for the dead rank


def test_collective_that_never_completes_is_ddp302(runner: CliRunner) -> None:
    report, code, elapsed = doctor_run(runner, fault="1:allreduce:stall")
    assert code == 1 and elapsed < TIMEOUT_S + 5
    (finding,) = findings(report, "DDP302")
    assert finding["evidence"]["stage"] == "allreduce"
    assert finding["evidence"]["stuck_ranks"] == [1]


def test_wrong_allreduce_result_is_ddp301_counted_per_rank(runner: CliRunner) -> None:
    report, code, _ = doctor_run(runner, fault="1:allreduce:corrupt")
    assert code == 1
    collectives = {
        f["evidence"]["collective"]: f["evidence"]["wrong_per_rank"]
        for f in findings(report, "DDP301")
    }
    assert collectives["all_reduce float32"] == {"0": 100, "1": 100}


def _worker_pids(marker: str) -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        yield int(entry.name)
            except OSError:
                continue


def test_job_past_its_timeout_is_killed_with_all_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group timeout (60 s) outlasts the job's bound (15 s): the parent must kill it all."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the job's folder marks its ranks
    config = JobConfig(nproc=2, sizes="1K:1K:2", iters=1, timeout_s=15, init_timeout_s=60)
    started = time.monotonic()
    with job_fault("1:allreduce:stall"):
        job = run_job(config, preflight(config))
    assert time.monotonic() - started < config.timeout_s + 5
    assert job.timed_out and job.exit_code is None
    assert {r.rank: r.last_started.stage for r in job.ranks} == {0: "allreduce", 1: "allreduce"}
    assert not list(_worker_pids(str(tmp_path)))
