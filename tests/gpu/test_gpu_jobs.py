"""NCCL, DataParallel and memory for real, on whatever GPUs this machine has (one is enough)."""

from __future__ import annotations

import sys

import pytest

from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.environment import collect_environment
from ddp_doctor.probes.job.dataparallel import collect_dataparallel
from ddp_doctor.probes.job.launch import JobConfig, preflight, run_job
from ddp_doctor.probes.nvml import collect_nvml
from ddp_doctor.rules.participation import gpu_parts
from ddp_doctor.run.jobplan import visible_gpus as visible_gpus_of

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


def test_a_healthy_job_holds_one_context_per_rank(gpu_count: int) -> None:
    """DDP403 counts the contexts NVML lists per GPU against the ranks there, with the
    processes that were on the GPUs before the job (NVML probe) left out."""
    _, before = visible_gpus()
    result = job(gpu_count)
    nvml = ProbeResult("nvml", ProbeStatus.OK, before, 0.0)
    rows = result.facts.rank(0).stage("memory").data["gpu_processes"]
    earlier = {p.pid for gpu in before.gpus for p in gpu.processes}
    new_pids = {row["pid"] for row in rows} - earlier
    assert len(new_pids) == gpu_count  # one process per rank, wherever its pid namespace
    assert "DDP403" not in {f.code for f in judge([nvml, result])}


def test_two_ranks_on_one_gpu_are_named_ddp305(
    gpu_count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    result = job(2)
    (finding,) = [f for f in judge([result]) if f.code == "DDP305"]
    assert finding.evidence["ranks"] == [0, 1]


def visible_gpus() -> tuple:
    """Every GPU this process may use, as NVML lists them (CUDA_VISIBLE_DEVICES applied)."""
    nvml = collect_nvml()
    return visible_gpus_of(nvml, collect_environment()), nvml


def test_dataparallel_probe_samples_every_visible_gpu_and_each_takes_part(gpu_count: int) -> None:
    sample, _ = visible_gpus()
    facts = collect_dataparallel(gpu_count, 120, sample)
    assert facts.error is None and facts.sampling_error is None
    assert facts.device_ids == tuple(range(gpu_count))
    assert facts.output_on == f"cuda:{facts.output_device}" and facts.model_device == "cuda:0"
    assert facts.forward_devices == tuple(range(gpu_count))
    assert facts.steps and facts.steps >= 2 and facts.parameter_bytes == 8_393_728 * 4
    assert len(facts.peak_allocated_bytes) == gpu_count and facts.peak_allocated_bytes[0] > 0
    assert len(facts.gpus) == len(sample) == gpu_count
    for gpu in facts.gpus:
        assert gpu.device_id is not None and gpu.samples >= 10, gpu
        assert gpu.memory_used_max_bytes - gpu.memory_used_min_bytes >= 16 * 1024**2, gpu
    assert all(part.took_part for part in gpu_parts(facts)), facts.gpus
    result = ProbeResult("dataparallel", ProbeStatus.OK, facts, 0.0)
    assert not {f.code for f in judge([result])} & {"DDP401", "DDP405", "DDP406"}


def test_a_batch_smaller_than_the_gpu_count_leaves_gpus_idle(gpu_count: int) -> None:
    """scatter makes one chunk per sample: with a batch of 1 only device_ids[0] works."""
    if gpu_count < 2:
        pytest.skip("needs 2 GPUs")
    sample, _ = visible_gpus()
    child = [sys.executable, "-c", BATCH_OF_ONE]
    facts = collect_dataparallel(gpu_count, 120, sample, command=child)
    assert facts.forward_devices == (0,)
    found = [f for f in judge([ProbeResult("dataparallel", ProbeStatus.OK, facts, 0.0)])]
    idle = sorted(f.evidence["device_id"] for f in found if f.code == "DDP406")
    assert idle == list(range(1, gpu_count))


BATCH_OF_ONE = (
    "import json; from ddp_doctor.patient.dataparallel_steps import measure; "
    "print(json.dumps(measure(batch=1)))"
)
