"""The DataParallel probe's parent side: NVML sampling (fake pynvml), the child's JSON, and
how sampled GPUs are matched to torch's devices. The child's steps need CUDA (tests/gpu)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import replace

import fakes
import pytest
from fakes import MIB, FakeGpu, FakeNvml

from ddp_doctor.facts.job import DataParallelFacts, DataParallelGpu
from ddp_doctor.facts.machine import GpuFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped, ProbeTimedOut
from ddp_doctor.probes.job.dataparallel import collect_dataparallel, match_devices
from ddp_doctor.probes.job.gpu_sampling import NvmlSampler, SamplingUnavailable

BUSES = ("00000000:18:00.0", "00000000:2A:00.0")
IDLE = 512 * MIB


def two_gpus(**options: object) -> list[FakeGpu]:
    return [FakeGpu(bus_id=bus, memory_used=IDLE, **options) for bus in BUSES]  # type: ignore[arg-type]


def visible(fake: FakeNvml) -> list[GpuFacts]:
    return [
        GpuFacts(index, "NVIDIA H100 80GB HBM3", "GPU-x", gpu.bus_id, gpu.memory_total, IDLE)  # type: ignore[arg-type]
        for index, gpu in enumerate(fake.gpus)
    ]


def child_output(**changes: object) -> dict:
    """What the child prints on 2 GPUs, as measure() builds it."""
    output = {
        "device_ids": [0, 1],
        "output_device": 0,
        "model_device": "cuda:0",
        "output_on": "cuda:0",
        "peak_allocated_bytes": [160 * MIB, 80 * MIB],
        "error": None,
        "batch": 256,
        "steps": 400,
        "forward_devices": [0, 1],
        "device_bus_ids": list(BUSES),
        "parameter_bytes": 33574912,
        "batch_bytes": 2097152,
    }
    output.update(changes)
    return output


def printing(output: dict) -> list[str]:
    return [sys.executable, "-c", f"print({json.dumps(json.dumps(output))})"]


# --- the sampler ------------------------------------------------------------------------------


def test_sampler_keeps_lowest_and_highest_memory_and_busiest_utilisation() -> None:
    fake = FakeNvml(gpus=two_gpus())
    sampler = NvmlSampler(fake.module(), [0, 1], interval_s=3600)
    sampler.start()
    fake.gpus[0].memory_used, fake.gpus[0].utilization = IDLE + 1100 * MIB, 37
    sampler.sample_once()
    fake.gpus[0].memory_used, fake.gpus[0].utilization = IDLE, 0
    sampler.stop()
    first, second = sampler.results()
    assert (first.nvml_index, first.pci_bus_id, first.samples) == (0, BUSES[0], 3)
    assert first.memory_used_min_bytes == IDLE
    assert first.memory_used_max_bytes == IDLE + 1100 * MIB
    assert first.utilization_gpu_max_percent == 37
    assert (second.memory_used_max_bytes, second.utilization_gpu_max_percent) == (IDLE, 0)
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown"


def test_the_thread_samples_while_the_work_runs() -> None:
    fake = FakeNvml(gpus=two_gpus())
    with NvmlSampler(fake.module(), [0, 1], interval_s=0.01) as sampler:
        deadline = time.monotonic() + 10
        while fake.calls.count("nvmlDeviceGetMemoryInfo") < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert all(gpu.samples >= 6 for gpu in sampler.results())
    assert not any(t.name == "nvml-sampler" and t.is_alive() for t in threading.enumerate())


def test_utilisation_not_supported_is_unknown_not_zero() -> None:
    """MIG and vGPU answer Not Supported for utilisation; memory is still sampled."""
    fake = FakeNvml(gpus=two_gpus(utilization=None))
    with NvmlSampler(fake.module(), [0], interval_s=3600) as sampler:
        pass
    (gpu,) = sampler.results()
    assert gpu.utilization_gpu_max_percent is None and gpu.memory_used_max_bytes == IDLE


def test_a_gpu_lost_mid_way_leaves_gaps_not_a_crash() -> None:
    fake = FakeNvml(
        gpus=two_gpus(), errors={"nvmlDeviceGetMemoryInfo": fakes.NVML_ERROR_GPU_IS_LOST}
    )
    with NvmlSampler(fake.module(), [0], interval_s=3600) as sampler:
        pass
    (gpu,) = sampler.results()
    assert gpu.samples == 2 and gpu.memory_used_min_bytes is None


def test_nvml_that_cannot_start_is_sampling_unavailable() -> None:
    fake = FakeNvml(gpus=two_gpus(), init_error=fakes.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(SamplingUnavailable, match="Driver Not Loaded"):
        NvmlSampler(fake.module(), [0]).start()


def test_a_gpu_that_cannot_be_opened_shuts_nvml_down() -> None:
    fake = FakeNvml(gpus=two_gpus())
    with pytest.raises(SamplingUnavailable):
        NvmlSampler(fake.module(), [0, 5]).start()
    assert fake.calls[-1] == "nvmlShutdown"


# --- the probe's parent side ------------------------------------------------------------------


def test_every_visible_gpu_is_sampled_and_matched_to_its_torch_device() -> None:
    fake = FakeNvml(gpus=two_gpus(utilization=23))
    facts = collect_dataparallel(2, 30, visible(fake), fake.module(), printing(child_output()))
    assert facts.sampling_error is None
    assert [(g.nvml_index, g.device_id) for g in facts.gpus] == [(0, 0), (1, 1)]
    assert all(g.samples >= 2 and g.utilization_gpu_max_percent == 23 for g in facts.gpus)
    assert facts.forward_devices == (0, 1) and facts.parameter_bytes == 33574912
    assert fake.calls[-1] == "nvmlShutdown"


def test_without_nvml_the_probe_runs_and_says_why_it_was_not_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml(gpus=two_gpus(), init_error=fakes.NVML_ERROR_LIBRARY_NOT_FOUND)
    facts = collect_dataparallel(2, 30, visible(fake), fake.module(), printing(child_output()))
    assert facts.gpus == () and "NVML could not start" in (facts.sampling_error or "")
    facts = collect_dataparallel(2, 30, (), None, printing(child_output()))
    assert facts.gpus == () and facts.sampling_error
    monkeypatch.setitem(sys.modules, "pynvml", None)
    facts = collect_dataparallel(2, 30, visible(fake), None, printing(child_output()))
    assert "nvidia-ml-py" in (facts.sampling_error or "")


def test_no_gpu_skips_before_anything_runs() -> None:
    fake = FakeNvml(gpus=two_gpus())
    with pytest.raises(ProbeSkipped):
        collect_dataparallel(0, 30, visible(fake), fake.module())
    assert fake.calls == []


def test_a_failing_child_fails_the_probe_and_stops_sampling() -> None:
    fake = FakeNvml(gpus=two_gpus())
    crash = [sys.executable, "-c", "import sys; sys.exit('CUDA error: no kernel image')"]
    with pytest.raises(ProbeFailed, match="no kernel image"):
        collect_dataparallel(2, 30, visible(fake), fake.module(), crash)
    assert fake.calls[-1] == "nvmlShutdown"


def test_a_dataparallel_error_keeps_the_facts() -> None:
    fake = FakeNvml(gpus=two_gpus())
    output = child_output(
        error="RuntimeError: CUDA error: an illegal memory access", output_on="none"
    )
    with pytest.raises(ProbeFailed) as caught:
        collect_dataparallel(2, 30, visible(fake), fake.module(), printing(output))
    assert isinstance(caught.value.facts, DataParallelFacts) and len(caught.value.facts.gpus) == 2


@pytest.mark.slow
def test_a_hanging_child_times_out_and_stops_sampling() -> None:
    fake = FakeNvml(gpus=two_gpus())
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(ProbeTimedOut):
        collect_dataparallel(2, 0.5, visible(fake), fake.module(), hang)
    assert fake.calls[-1] == "nvmlShutdown"


def test_devices_are_matched_by_bus_id_not_position() -> None:
    """CUDA's default order (fastest first) may differ from NVML's PCI order."""
    facts = DataParallelFacts(
        (0, 1), 0, "cuda:0", "cuda:0", (1, 1), device_bus_ids=("00000000:2a:00.0", "0000:18:00.0")
    )
    sampled = [DataParallelGpu(0, BUSES[0]), DataParallelGpu(1, BUSES[1])]
    assert [g.device_id for g in match_devices(sampled, facts)] == [1, 0]


def test_without_bus_ids_devices_are_matched_by_position() -> None:
    facts = DataParallelFacts((0,), 0, "cuda:0", "cuda:0", (1,), device_bus_ids=(None,))
    sampled = [DataParallelGpu(0, BUSES[0]), DataParallelGpu(1, BUSES[1])]
    assert [g.device_id for g in match_devices(sampled, facts)] == [0, None]
    unknown = replace(facts, device_bus_ids=())
    assert [g.device_id for g in match_devices(sampled, unknown)] == [0, None]


@pytest.mark.slow
def test_cpu_torch_child_reports_no_cuda() -> None:
    """The real child on this machine's CPU torch: it says why, and the probe fails."""
    with pytest.raises(ProbeFailed, match="is_available"):
        collect_dataparallel(1, 120)


def test_run_samples_the_gpus_cuda_visible_devices_leaves(invoke, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`ddp-doctor run` hands the probe NVML's visible GPUs (here GPU 1 of 2) to sample."""
    from fakes import collect_torch_returning

    from ddp_doctor.facts.machine import TorchFacts
    from ddp_doctor.model import ProbeResult, ProbeStatus
    from ddp_doctor.probes import torch_info
    from ddp_doctor.probes.job import dataparallel
    from ddp_doctor.probes.runner import CommandResult
    from ddp_doctor.run import checkup

    fake = FakeNvml(gpus=two_gpus(utilization=40))
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    cuda_torch = TorchFacts(importable=True, version="2.5.1+cu124", cuda_version="12.4")
    monkeypatch.setattr(torch_info, "collect_torch", collect_torch_returning(cuda_torch))
    skipped_job = ProbeResult("job", ProbeStatus.SKIPPED, None, 0.0, "not in this test")
    monkeypatch.setattr(checkup, "_job", lambda *args: (skipped_job, args[-1]))
    output = child_output(device_ids=[0], peak_allocated_bytes=[90 * MIB], forward_devices=[0])
    output["device_bus_ids"] = [BUSES[1]]

    def child(argv: object, timeout_s: float, **_: object) -> CommandResult:
        return CommandResult(("child",), 0, json.dumps(output) + "\n", "", 0.1)

    monkeypatch.setattr(dataparallel, "run_command", child)
    result = invoke("run", "--format", "json", env={"CUDA_VISIBLE_DEVICES": "1"})
    probes = {p["probe"]: p for p in json.loads(result.stdout)["probes"]}
    gpus = probes["dataparallel"]["facts"]["gpus"]
    assert [(g["nvml_index"], g["device_id"]) for g in gpus] == [(1, 0)]
