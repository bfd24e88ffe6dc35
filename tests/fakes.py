"""Fakes at the probes' boundaries: a pynvml module, a torch-probe runner, quick probe sets.

The fake pynvml has the function names, exception classes, error codes and constants of
nvidia-ml-py (module `pynvml`), so the NVML probe runs unchanged against it;
test_probes_nvml.py checks every name against the real module where it is installed. The
topology queries live in fake_topology.py, which FakeNvml inherits.
"""

from __future__ import annotations

import contextlib
import json
import os
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fake_topology import (
    TOPOLOGY_CONSTANTS,
    FakeNvLink,
    FakePair,
    TopologyQueries,
    c_nvmlGpuFabricInfo_t,
    c_nvmlGpuFabricInfoV_t,
)
from job_hook.job_faults import VARIABLE as FAULT_VARIABLE
from job_hook.job_faults import parse_fault

from ddp_doctor.facts.machine import TorchFacts
from ddp_doctor.probes.runner import CommandResult

MIB = 1024**2

# Error codes and constants as nvidia-ml-py defines them.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

CONSTANTS = {
    "NVML_SUCCESS": NVML_SUCCESS,
    "NVML_ERROR_UNINITIALIZED": NVML_ERROR_UNINITIALIZED,
    "NVML_ERROR_INVALID_ARGUMENT": NVML_ERROR_INVALID_ARGUMENT,
    "NVML_ERROR_NOT_SUPPORTED": NVML_ERROR_NOT_SUPPORTED,
    "NVML_ERROR_NO_PERMISSION": NVML_ERROR_NO_PERMISSION,
    "NVML_ERROR_NOT_FOUND": NVML_ERROR_NOT_FOUND,
    "NVML_ERROR_DRIVER_NOT_LOADED": NVML_ERROR_DRIVER_NOT_LOADED,
    "NVML_ERROR_LIBRARY_NOT_FOUND": NVML_ERROR_LIBRARY_NOT_FOUND,
    "NVML_ERROR_GPU_IS_LOST": NVML_ERROR_GPU_IS_LOST,
    "NVML_ERROR_UNKNOWN": NVML_ERROR_UNKNOWN,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AGGREGATE_ECC": 1,
    "NVML_DEVICE_MIG_DISABLE": 0,
    "NVML_DEVICE_MIG_ENABLE": 1,
    "NVML_COMPUTEMODE_DEFAULT": 0,
    "NVML_COMPUTEMODE_EXCLUSIVE_THREAD": 1,
    "NVML_COMPUTEMODE_PROHIBITED": 2,
    "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS": 3,
    **TOPOLOGY_CONSTANTS,
}
COMPUTE_MODE_CODES = {"default": 0, "exclusive-thread": 1, "prohibited": 2, "exclusive-process": 3}

ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: NVMLError(code) builds the subclass registered for the code."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012  (pynvml's own name)

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __str__(self) -> str:
        return ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], value: int = code) -> NVMLError:
        error = Exception.__new__(cls)
        error.value = value
        return error

    cls = type(name, (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)

ERROR_CLASSES = {
    cls.__name__: cls
    for cls in (
        NVMLError,
        NVMLError_Uninitialized,
        NVMLError_InvalidArgument,
        NVMLError_NotSupported,
        NVMLError_NoPermission,
        NVMLError_NotFound,
        NVMLError_DriverNotLoaded,
        NVMLError_LibraryNotFound,
        NVMLError_GpuIsLost,
        NVMLError_Unknown,
    )
}


@dataclass
class FakeGpu:
    """One GPU as NVML describes it; None for a query means NVML answers "Not Supported"."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-5d0e1c3a-8b2f-4c71-9e6a-0f3b2d4c5a61"
    bus_id: str | bytes = "00000000:18:00.0"
    memory_total: int = 81559 * MIB
    memory_used: int = 512 * MIB
    capability: tuple[int, int] | None = (9, 0)
    mig_mode: int | None = 0
    mig_uuids: tuple[str, ...] = ()
    max_mig_devices: int = 7
    compute_mode: int | None = 0
    ecc_uncorrected: int | None = 0
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, usedGpuMemory)
    # Topology (probes/topology.py): None answers "Not Supported" as for the queries above.
    pcie_idle: tuple[int, int] | None = (1, 16)  # current (gen, width) while idle
    pcie_loaded: tuple[int, int] | None = (4, 16)  # current (gen, width) under load
    pcie_max: tuple[int, int] | None = (4, 16)  # max (gen, width), card and slot together
    gpu_max_gen: int | None = 4
    numa_node: int | None = None  # nvmlDeviceGetNumaNodeId: Not Supported on x86 servers
    memory_nodes: tuple[int, ...] | None = (0,)  # nvmlDeviceGetMemoryAffinity's NUMA nodes
    cpus: tuple[int, ...] | None = tuple(range(8))  # nvmlDeviceGetCpuAffinity
    nvlinks: tuple[FakeNvLink, ...] = ()
    fabric: tuple[str, int] | None = None  # (state, status); None: Not Supported
    utilization: int | None = 0  # nvmlUtilization_t.gpu, percent


@dataclass(frozen=True)
class _Handle:
    index: int
    mig_slot: int | None = None


@dataclass
class FakeNvml(TopologyQueries):
    """Builds a module that behaves like pynvml on a machine with these GPUs.

    `init_error` makes nvmlInit raise that code; `errors` maps a function name to the code it
    raises. `calls` records every call, so tests can check that nvmlShutdown followed nvmlInit.
    """

    gpus: Sequence[FakeGpu] = ()
    driver_version: str = "550.54.15"
    cuda_driver_version: int | None = 12040
    init_error: int | None = None
    errors: dict[str, int] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    pairs: dict[tuple[int, int], FakePair] = field(default_factory=dict)  # (low, high) index
    default_pair: FakePair = field(default_factory=FakePair)
    under_load: bool = False  # the current PCIe link readings: idle or loaded
    old_nvidia_ml_py: bool = False  # no fabric queries, as before nvidia-ml-py 12.535

    def module(self) -> types.ModuleType:
        module = types.ModuleType("pynvml")
        module.__dict__.update(CONSTANTS)
        module.__dict__.update(ERROR_CLASSES)
        if not self.old_nvidia_ml_py:
            module.c_nvmlGpuFabricInfo_t = c_nvmlGpuFabricInfo_t
            module.c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfoV_t
        for name in dir(self):
            if name.startswith("nvml") and not (self.old_nvidia_ml_py and "Fabric" in name):
                module.__dict__[name] = self._recorded(name, getattr(self, name))
        return module

    def _recorded(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            if name in self.errors:
                raise NVMLError(self.errors[name])
            return function(*args)

        call.__name__ = name
        return call

    # --- the pynvml functions the probe calls, under their real names -------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda_driver_version is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        gpu = self._gpu(handle)
        return gpu.uuid if handle.mig_slot is None else gpu.mig_uuids[handle.mig_slot]

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=self._gpu(handle).bus_id, domain=0)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> types.SimpleNamespace:
        gpu = self._gpu(handle)
        return types.SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> types.SimpleNamespace:
        busy = self._supported(self._gpu(handle).utilization)
        return types.SimpleNamespace(gpu=busy, memory=busy // 2)

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._supported(self._gpu(handle).capability)

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        mode = self._supported(self._gpu(handle).mig_mode)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        self._supported(gpu.mig_mode)
        return gpu.max_mig_devices if gpu.mig_mode else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, slot: int) -> _Handle:
        if slot >= len(self._gpu(handle).mig_uuids):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(handle.index, slot)

    def nvmlDeviceGetComputeMode(self, handle: _Handle) -> int:
        return self._supported(self._gpu(handle).compute_mode)

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        assert error_type == CONSTANTS["NVML_MEMORY_ERROR_TYPE_UNCORRECTED"]
        assert counter == CONSTANTS["NVML_VOLATILE_ECC"]
        return self._supported(self._gpu(handle).ecc_uncorrected)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[types.SimpleNamespace]:
        return [
            types.SimpleNamespace(pid=pid, usedGpuMemory=used)
            for pid, used in self._gpu(handle).processes
        ]

    def _gpu(self, handle: _Handle) -> FakeGpu:
        return self.gpus[handle.index]

    @staticmethod
    def _supported(value: Any) -> Any:
        if value is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return value

    @staticmethod
    def _refuse(code: int) -> Any:
        raise NVMLError(code)


def fake_nvml_module(*gpus: FakeGpu, **options: Any) -> types.ModuleType:
    return FakeNvml(gpus=gpus, **options).module()


# --- the torch probe's runner -----------------------------------------------------------------


def torch_runner(
    stdout: str = "", stderr: str = "", returncode: int | None = 0
) -> Callable[..., CommandResult]:
    """A runner for collect_torch that answers as the child process would have."""

    def run(argv: Sequence[str], timeout_s: float, **_: Any) -> CommandResult:
        return CommandResult(tuple(argv), returncode, stdout, stderr, 0.01)

    return run


def torch_json(**facts: Any) -> str:
    return json.dumps(facts) + "\n"


CPU_TORCH = TorchFacts(
    importable=True,
    version="2.13.0+cpu",
    distributed_available=True,
    nccl_available=False,
    gloo_available=True,
)


def collect_torch_returning(facts: TorchFacts = CPU_TORCH) -> Callable[..., TorchFacts]:
    """A stand-in for probes.torch_info.collect_torch that imports nothing."""

    def collect(*_: Any, **__: Any) -> TorchFacts:
        return facts

    return collect


FAULT_HOOK = Path(__file__).with_name("job_hook")  # its sitecustomize injects the fault


@contextlib.contextmanager
def job_fault(fault: str | None) -> Iterator[None]:
    """Jobs started meanwhile have this fault ("RANK:STAGE:ACTION", tests/job_hook/job_faults.py)
    injected: the hook's folder goes on the PYTHONPATH the job inherits (after the payload), and
    DDP_DOCTOR_TEST_FAULT names the fault. The package knows nothing of it."""
    if fault is None:
        yield
        return
    parse_fault(fault)  # a typo fails here, not silently inside a rank
    paths = [str(FAULT_HOOK), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    changes = {"PYTHONPATH": os.pathsep.join(paths), FAULT_VARIABLE: fault}
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
