"""NCCL, DataParallel and memory for real, on whatever GPUs this machine has (one is enough)."""

from __future__ import annotations

import pytest

from ddp_doctor.engine import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.dataparallel import collect_dataparallel
from ddp_doctor.probes.launch import JobConfig, preflight, run_job

pytestmark = pytest.mark.gpu


def job(nproc: int, **overrides: object) -> ProbeResult:
    config = JobConfig(
        nproc=nproc,
        backend="nccl",
        sizes="1M:64M:8",
        iters=5,
        timeout_s=120,
        init_timeout_s=30,
        **overrides,
    )  # type: ignore[arg-type]
    return ProbeResult("job", ProbeStatus.OK, run_job(config, preflight(config)), 0.0)


def test_one_rank_per_gpu_nccl_job_passes_every_stage(gpu_count: int) -> None:
    result = job(gpu_count)
    facts = result.facts
    assert facts.exit_code == 0 and facts.backend == "nccl"
    for rank in facts.ranks:
        assert all(stage.ok for stage in rank.stages), rank
        assert rank.stage("ddp").data["in_sync"] is True
        assert rank.stage("ddp").data["peak_allocated_bytes"] > 0
    assert all(identity.pci_bus_id for identity in facts.identities)
    assert len({identity.pci_bus_id for identity in facts.identities}) == gpu_count
    assert facts.bandwidth and all(row.time_us > 0 for row in facts.bandwidth)
    processes = facts.rank(0).stage("memory").data["gpu_processes"]
    # NVML names host pids; inside a container with its own pid namespace they differ from
    # the ranks' own, so only the rows themselves are checked here.
    assert processes and all("pid" in row and "pci_bus_id" in row for row in processes)
    codes = {f.code for f in judge([result])}
    assert not codes & {"DDP301", "DDP302", "DDP305", "DDP307", "DDP402", "DDP403"}


def test_two_ranks_on_one_gpu_are_named_ddp305(
    gpu_count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    result = job(2)
    (finding,) = [f for f in judge([result]) if f.code == "DDP305"]
    assert finding.evidence["ranks"] == [0, 1]


def test_dataparallel_probe_measures_every_visible_gpu(gpu_count: int) -> None:
    facts = collect_dataparallel(gpu_count)
    assert facts.error is None
    assert facts.device_ids == tuple(range(gpu_count))
    assert facts.output_on == f"cuda:{facts.output_device}"
    assert facts.model_device == "cuda:0"
    assert len(facts.peak_allocated_bytes) == gpu_count and facts.peak_allocated_bytes[0] > 0
    result = ProbeResult("dataparallel", ProbeStatus.OK, facts, 0.0)
    assert "DDP405" not in {f.code for f in judge([result])}
