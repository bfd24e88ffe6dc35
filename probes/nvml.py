"""GPU facts from NVML (the nvidia-ml-py package, module `pynvml`), as nvidia-smi sees them.

The pynvml module is passed in so that tests can hand a fake at this boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ddp_doctor.facts.machine import GpuFacts, GpuProcess, NvmlFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped

COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}


def import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise ProbeSkipped(
            "nvidia-ml-py is not installed, so GPUs cannot be listed (pip install nvidia-ml-py)"
        ) from None
    return pynvml


def collect_nvml(nvml: ModuleType | None = None) -> NvmlFacts:
    nvml = nvml or import_pynvml()
    start_nvml(nvml)
    try:
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise ProbeSkipped("the NVIDIA driver is loaded but sees no GPU")
        return NvmlFacts(
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=_cuda_driver_version(nvml),
            gpus=tuple(_gpu(nvml, index) for index in range(count)),
        )
    except nvml.NVMLError as error:
        raise ProbeFailed(f"NVML query failed: {error}") from None
    finally:
        _optional(nvml.nvmlShutdown)


def start_nvml(nvml: ModuleType) -> None:
    """nvmlInit; no driver is a skipped probe, any other NVML error a failed one."""
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError_LibraryNotFound, nvml.NVMLError_DriverNotLoaded) as error:
        raise ProbeSkipped(f"no NVIDIA driver: {error}") from None
    except nvml.NVMLError as error:
        raise ProbeFailed(f"NVML could not start: {error}") from None


def _cuda_driver_version(nvml: ModuleType) -> str | None:
    version = _optional(nvml.nvmlSystemGetCudaDriverVersion)
    return None if version is None else f"{version // 1000}.{(version % 1000) // 10}"


def _gpu(nvml: ModuleType, index: int) -> GpuFacts:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    capability = _optional(lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    mig_mode, mig_devices = _mig(nvml, handle)
    return GpuFacts(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        memory_total_bytes=int(memory.total),
        memory_used_bytes=int(memory.used),
        compute_capability=tuple(capability) if capability else None,
        mig_mode=mig_mode,
        mig_devices=mig_devices,
        compute_mode=COMPUTE_MODES.get(
            _optional(lambda: nvml.nvmlDeviceGetComputeMode(handle)), "default"
        ),
        ecc_uncorrectable_volatile=_optional(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        ),
        processes=_processes(nvml, handle),
    )


def _mig(nvml: ModuleType, handle: Any) -> tuple[bool | None, tuple[str, ...]]:
    modes = _optional(lambda: nvml.nvmlDeviceGetMigMode(handle))
    if modes is None:
        return None, ()
    if modes[0] != nvml.NVML_DEVICE_MIG_ENABLE:
        return False, ()
    uuids = []
    for slot in range(_optional(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle)) or 0):
        mig = _optional(lambda slot=slot: nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        if mig is not None:
            uuids.append(_text(nvml.nvmlDeviceGetUUID(mig)))
    return True, tuple(uuids)


def _processes(nvml: ModuleType, handle: Any) -> tuple[GpuProcess, ...]:
    running = _optional(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)) or []
    return tuple(
        GpuProcess(
            pid=int(p.pid),
            name=process_name(int(p.pid)),
            used_memory_bytes=int(p.usedGpuMemory) if p.usedGpuMemory is not None else None,
        )
        for p in running
    )


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or None
    except OSError:
        return None


def _optional(call: Callable[[], Any]) -> Any:
    """NVML answers NotSupported for many queries on some GPUs: that is 'unknown', not failure."""
    try:
        return call()
    except Exception:
        return None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
