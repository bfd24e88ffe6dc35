"""The NVML probe against a fake pynvml module with nvidia-ml-py's names and errors."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import fakes
import pytest
from fakes import MIB, FakeGpu, FakeNvml, fake_nvml_module

from ddp_doctor.engine import Probe, run_probe
from ddp_doctor.facts.machine import GpuProcess
from ddp_doctor.model import ProbeStatus
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped
from ddp_doctor.probes.nvml import collect_nvml

H100_UUIDS = [f"GPU-5d0e1c3a-8b2f-4c71-9e6a-0f3b2d4c5a6{i}" for i in range(8)]
HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def hgx_h100() -> list[FakeGpu]:
    return [
        FakeGpu(uuid=uuid, bus_id=f"00000000:{bus}:00.0")
        for uuid, bus in zip(H100_UUIDS, HGX_BUSES, strict=True)
    ]


def result_of(module: object) -> object:
    return run_probe(Probe("nvml", lambda: collect_nvml(module), 5.0))  # type: ignore[arg-type]


def test_healthy_gpus() -> None:
    facts = collect_nvml(fake_nvml_module(*hgx_h100()))
    assert facts.driver_version == "550.54.15"
    assert facts.cuda_driver_version == "12.4"
    assert [g.index for g in facts.gpus] == list(range(8))
    first = facts.gpus[0]
    assert first.name == "NVIDIA H100 80GB HBM3"
    assert first.uuid == H100_UUIDS[0]
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.memory_total_bytes == 81559 * MIB
    assert first.memory_used_bytes == 512 * MIB
    assert first.compute_capability == (9, 0)
    assert first.mig_mode is False and first.mig_devices == ()
    assert first.compute_mode == "default"
    assert first.ecc_uncorrectable_volatile == 0
    assert first.processes == ()
    assert facts.gpus[7].pci_bus_id == "00000000:DB:00.0"


def test_cuda_driver_version_is_major_dot_minor() -> None:
    for raw, text in ((12040, "12.4"), (11040, "11.4"), (12080, "12.8"), (13000, "13.0")):
        facts = collect_nvml(fake_nvml_module(FakeGpu(), cuda_driver_version=raw))
        assert facts.cuda_driver_version == text


def test_shutdown_follows_init() -> None:
    fake = FakeNvml(gpus=hgx_h100())
    collect_nvml(fake.module())
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown"


def test_mig_slices_are_listed() -> None:
    slices = (
        "MIG-3b4f6e1d-2a9c-5e7b-8d0f-1c2e3a4b5c6d",
        "MIG-7e8f9a0b-1c2d-5e3f-9a4b-5c6d7e8f9a0b",
    )
    gpu = FakeGpu(name="NVIDIA A100 80GB PCIe", capability=(8, 0), mig_mode=1, mig_uuids=slices)
    facts = collect_nvml(fake_nvml_module(gpu))
    assert facts.gpus[0].mig_mode is True
    assert facts.gpus[0].mig_devices == slices


def test_gpu_without_mig_ecc_or_compute_mode_support() -> None:
    """GeForce cards answer Not Supported for MIG and ECC: unknown, not a failure."""
    gpu = FakeGpu(
        name="NVIDIA GeForce RTX 4090",
        capability=(8, 9),
        mig_mode=None,
        ecc_uncorrected=None,
        compute_mode=None,
    )
    facts = collect_nvml(fake_nvml_module(gpu, cuda_driver_version=None))
    assert facts.cuda_driver_version is None
    assert facts.gpus[0].mig_mode is None
    assert facts.gpus[0].ecc_uncorrectable_volatile is None
    assert facts.gpus[0].compute_mode == "default"


@pytest.mark.parametrize(
    ("code", "mode"),
    [(0, "default"), (1, "exclusive-thread"), (2, "prohibited"), (3, "exclusive-process")],
)
def test_compute_modes(code: int, mode: str) -> None:
    facts = collect_nvml(fake_nvml_module(FakeGpu(compute_mode=code)))
    assert facts.gpus[0].compute_mode == mode


def test_ecc_errors_and_processes() -> None:
    me = os.getpid()
    own_name = Path(f"/proc/{me}/comm").read_text().strip() if sys.platform == "linux" else None
    gpu = FakeGpu(
        ecc_uncorrected=2,
        memory_used=79102 * MIB,
        processes=((me, 78588 * MIB), (2**22 + 12345, None)),
    )
    facts = collect_nvml(fake_nvml_module(gpu))
    assert facts.gpus[0].ecc_uncorrectable_volatile == 2
    assert facts.gpus[0].memory_used_bytes == 79102 * MIB
    assert facts.gpus[0].processes == (
        GpuProcess(me, own_name, 78588 * MIB),
        GpuProcess(2**22 + 12345, None, None),
    )


def test_bus_id_as_bytes_from_older_nvidia_ml_py() -> None:
    facts = collect_nvml(fake_nvml_module(FakeGpu(bus_id=b"00000000:18:00.0")))
    assert facts.gpus[0].pci_bus_id == "00000000:18:00.0"


@pytest.mark.parametrize(
    "code", [fakes.NVML_ERROR_LIBRARY_NOT_FOUND, fakes.NVML_ERROR_DRIVER_NOT_LOADED]
)
def test_no_driver_is_skipped_with_a_reason(code: int) -> None:
    with pytest.raises(ProbeSkipped) as caught:
        collect_nvml(fake_nvml_module(init_error=code))
    assert caught.value.reason
    result = result_of(fake_nvml_module(init_error=code))
    assert result.status is ProbeStatus.SKIPPED and result.error and result.facts is None


def test_zero_gpus_is_skipped_and_shuts_down() -> None:
    fake = FakeNvml(gpus=())
    result = result_of(fake.module())
    assert result.status is ProbeStatus.SKIPPED and result.error
    assert fake.calls[-1] == "nvmlShutdown"


def test_nvidia_ml_py_not_installed_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` now raises ImportError
    result = run_probe(Probe("nvml", collect_nvml, 5.0))
    assert result.status is ProbeStatus.SKIPPED
    assert result.error and "nvidia-ml-py" in result.error


@pytest.mark.parametrize(
    "function",
    ["nvmlDeviceGetCount", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUUID", "nvmlDeviceGetName"],
)
def test_a_failing_query_fails_the_probe(function: str) -> None:
    fake = FakeNvml(gpus=hgx_h100(), errors={function: fakes.NVML_ERROR_UNKNOWN})
    with pytest.raises(ProbeFailed):
        collect_nvml(fake.module())
    fake.calls.clear()
    result = result_of(fake.module())
    assert result.status is ProbeStatus.FAILED and result.error
    assert fake.calls[-1] == "nvmlShutdown"


def test_init_without_permission_fails_the_probe() -> None:
    result = result_of(fake_nvml_module(init_error=fakes.NVML_ERROR_NO_PERMISSION))
    assert result.status is ProbeStatus.FAILED and result.error


def test_gpu_lost_mid_query_fails_not_crashes() -> None:
    fake = FakeNvml(gpus=hgx_h100(), errors={"nvmlDeviceGetPciInfo": fakes.NVML_ERROR_GPU_IS_LOST})
    assert result_of(fake.module()).status is ProbeStatus.FAILED


# --- the fake against the real module ----------------------------------------------------------


def test_fake_matches_nvidia_ml_py() -> None:
    """Every name the fake exposes exists in pynvml with the same value or kind."""
    real = pytest.importorskip("pynvml")
    fake = fake_nvml_module()
    for name, value in vars(fake).items():
        if name.startswith("__"):
            continue
        assert hasattr(real, name), f"pynvml has no {name}"
        if name.startswith("NVML_"):
            assert getattr(real, name) == value, name
        elif name.startswith("NVMLError"):
            assert issubclass(getattr(real, name), real.NVMLError)
            assert issubclass(value, fake.NVMLError)
        else:
            assert callable(getattr(real, name)), name
    for code, cls in fakes.NVMLError._valClassMapping.items():
        assert type(real.NVMLError(code)).__name__ == cls.__name__
        assert str(real.NVMLError(code)) == str(fakes.NVMLError(code))
