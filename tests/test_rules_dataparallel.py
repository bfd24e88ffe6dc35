"""DDP401, DDP405 and DDP406 on the recorded DataParallel facts (fixtures/jobs/dataparallel-*):
they judge the machine and torch against what a healthy DataParallel run does."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor.facts.job import DataParallelFacts, DataParallelGpu
from ddp_doctor.judge import judge
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus
from ddp_doctor.report_io import report_from_json
from ddp_doctor.rules.participation import gpu_parts

JOBS = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"
MIB = 1024**2
HEALTHY = ("dataparallel-2gpu-healthy", "dataparallel-4gpu-healthy", "dataparallel-8gpu-healthy")


def dataparallel(name: str) -> DataParallelFacts:
    report = report_from_json(json.loads((JOBS / f"{name}.json").read_text()))
    return next(r.facts for r in report.probes if r.probe == "dataparallel")


def findings(dp: DataParallelFacts, code: str) -> list[Finding]:
    result = ProbeResult("dataparallel", ProbeStatus.OK, dp, 1.0)
    return [f for f in judge([result]) if f.code == code]


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_run_is_silent_though_gpu0_holds_more(name: str) -> None:
    """GPU 0 holds the master weights, their gradients and the gathered output: more than
    1.5x a replica (what DDP401 used to fire on), and still healthy."""
    dp = dataparallel(name)
    first, replicas = dp.peak_allocated_bytes[0], dp.peak_allocated_bytes[1:]
    assert first > 1.5 * statistics.mean(replicas)
    for code in ("DDP401", "DDP405", "DDP406"):
        assert findings(dp, code) == [], code
    assert all(part.took_part for part in gpu_parts(dp))


def test_gpu0_far_above_a_healthy_run_fires() -> None:
    (finding,) = findings(dataparallel("dataparallel-4gpu-gpu0-heavy"), "DDP401")
    assert finding.evidence["peak_bytes"][0] == 2254 * MIB
    assert finding.evidence["expected_bytes"] < 256 * MIB


def test_the_floor_keeps_small_excesses_silent() -> None:
    """1.5x the healthy amount but less than 256 MiB above it: nothing to act on."""
    dp = dataparallel("dataparallel-2gpu-healthy")
    small = replace(dp, peak_allocated_bytes=(300 * MIB, 60 * MIB), parameter_bytes=0)
    assert findings(small, "DDP401") == []
    assert findings(replace(small, peak_allocated_bytes=(700 * MIB, 60 * MIB)), "DDP401")


def test_gpu0_is_compared_with_the_gpus_that_held_a_replica() -> None:
    dp = dataparallel("dataparallel-8gpu-small-batch")
    assert dp.peak_allocated_bytes[-1] == 0
    assert findings(dp, "DDP401") == []


def test_a_gpu_torch_does_not_see_took_no_part() -> None:
    (finding,) = findings(dataparallel("dataparallel-4gpu-torch-sees-3"), "DDP406")
    assert finding.evidence == {
        "gpu": 3,
        "pci_bus_id": "00000000:5D:00.0",
        "device_id": None,
        "reason": "not-seen-by-torch",
        "gpus_working": 3,
        "gpus_visible": 4,
    }


def test_gpus_left_without_a_chunk_of_the_batch_took_no_part() -> None:
    found = findings(dataparallel("dataparallel-8gpu-small-batch"), "DDP406")
    assert [(f.evidence["gpu"], f.evidence["reason"]) for f in found] == [
        (6, "no-replica"),
        (7, "no-replica"),
    ]


def _flat(gpu: DataParallelGpu) -> DataParallelGpu:
    return replace(
        gpu,
        memory_used_max_bytes=gpu.memory_used_min_bytes,
        utilization_gpu_max_percent=0,
    )


def test_a_gpu_nvml_saw_idle_took_no_part_whatever_torch_says() -> None:
    """As users check with nvidia-smi: no memory rise, 0% busy, although a replica ran."""
    dp = dataparallel("dataparallel-2gpu-healthy")
    idle = replace(dp, gpus=(dp.gpus[0], _flat(dp.gpus[1])))
    (finding,) = findings(idle, "DDP406")
    assert (finding.evidence["gpu"], finding.evidence["reason"]) == (1, "no-activity")


def test_busy_but_no_memory_rise_is_taking_part() -> None:
    dp = dataparallel("dataparallel-2gpu-healthy")
    busy = replace(_flat(dp.gpus[1]), utilization_gpu_max_percent=12)
    assert findings(replace(dp, gpus=(dp.gpus[0], busy)), "DDP406") == []


def test_a_device_left_out_of_device_ids_took_no_part() -> None:
    dp = dataparallel("dataparallel-2gpu-healthy")
    narrowed = replace(
        dp, device_ids=(0,), peak_allocated_bytes=dp.peak_allocated_bytes[:1], forward_devices=(0,)
    )
    (finding,) = findings(narrowed, "DDP406")
    assert finding.evidence["reason"] == "not-in-device-ids" and finding.evidence["device_id"] == 1


def test_nothing_is_judged_where_nothing_was_measured() -> None:
    """An older report: no NVML samples, no record of where forwards ran."""
    old = dataparallel("dataparallel-output-mismatch")
    assert old.gpus == () and old.forward_devices is None
    assert findings(old, "DDP406") == []
    assert all(part.took_part is None for part in gpu_parts(old))


def test_a_failed_probe_is_not_idle_gpus() -> None:
    dp = dataparallel("dataparallel-8gpu-small-batch")
    failed = replace(dp, error="RuntimeError: CUDA error: out of memory", output_on="none")
    assert findings(failed, "DDP406") == [] and findings(failed, "DDP401") == []


def test_output_on_the_wrong_device_is_torchs_mismatch() -> None:
    dp = dataparallel("dataparallel-4gpu-healthy")
    (finding,) = findings(replace(dp, output_on="cuda:3"), "DDP405")
    assert finding.evidence == {
        "output_on": "cuda:3",
        "model_device": "cuda:0",
        "output_device": "cuda:0",
    }


def test_the_report_shows_which_gpus_took_part() -> None:
    from ddp_doctor.render.dataparallel_table import render_dataparallel_text
    from ddp_doctor.render.markdown import render_markdown

    dp = dataparallel("dataparallel-8gpu-small-batch")
    rows = [line.split() for line in render_dataparallel_text(dp).splitlines()[2:]]
    assert [(row[0], row[-1]) for row in rows] == [(str(i), "yes") for i in range(6)] + [
        ("6", "NO"),
        ("7", "NO"),
    ]
    document = json.loads((JOBS / "dataparallel-8gpu-small-batch.json").read_text())
    markdown = render_markdown(document)
    assert "### DataParallel" in markdown and "00000000:DB:00.0" in markdown
