"""One frozen dataclass per probe's facts, and the bundle that rules read.

Facts are what a probe measured, never a judgement. They round-trip through JSON
(codec.py), so a saved report can be re-judged elsewhere (`ddp-doctor diagnose`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddp_doctor.facts.attach import AttachFacts
from ddp_doctor.facts.cluster import ClusterFacts, NetworkFacts, NodePlan
from ddp_doctor.facts.job import DataParallelFacts, JobFacts
from ddp_doctor.facts.topology import TopologyFacts
from ddp_doctor.facts.trace import TraceFacts
from ddp_doctor.model import ProbeResult


@dataclass(frozen=True)
class HostFacts:
    system: str  # platform.system(): "Linux", "Windows", "Darwin"
    release: str
    python_version: str
    hostname: str
    hostname_address: str | None = None  # what the host name resolves to
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory_total_bytes: int | None = None
    container: str | None = None  # "docker", "podman", "kubernetes", "container" or None
    wsl: bool = False
    shm_total_bytes: int | None = None  # statvfs("/dev/shm"); None where there is none
    jupyter_kernel: bool = False
    interfaces: tuple[str, ...] = ()  # network interface names (socket.if_nameindex)
    interfaces_up: tuple[str, ...] | None = None  # those with IFF_UP set; None: not known here
    # NVIDIA device nodes in /dev (nvidia0, nvidiactl, nvidia-uvm; dxg under WSL2); None where
    # /dev was not read (not Linux)
    gpu_device_nodes: tuple[str, ...] | None = None


OLDEST_PATIENT_PYTHON = (3, 9)  # the payload's syntax; torch itself needs 3.10 since 2.9


@dataclass(frozen=True)
class PythonCandidate:
    """Another Python that may be the training environment, and whether torch is in it."""

    executable: str
    found_as: str  # "VIRTUAL_ENV", "CONDA_PREFIX", ".venv in the working folder" ...
    has_torch: bool


@dataclass(frozen=True)
class PythonFacts:
    """The patient: the interpreter whose torch is examined and which runs the job."""

    executable: str
    chosen_by: str  # "--python", "VIRTUAL_ENV is set", "python3 on PATH" ...
    runs: bool = True
    error: str | None = None  # why it does not run
    version: str | None = None
    implementation: str | None = None
    prefix: str | None = None
    virtual_env: bool = False
    torch_origin: str | None = None  # where `import torch` would load from; None: no torch
    os_release: str | None = None
    libc: str | None = None
    packages: Mapping[str, str] = field(default_factory=dict)  # around DDP: name -> version
    nccl_libraries: tuple[str, ...] = ()  # libnccl files the nvidia-nccl wheels install
    candidates: tuple[PythonCandidate, ...] = ()  # the other environments found, for the fix

    @property
    def version_tuple(self) -> tuple[int, ...] | None:
        try:
            return tuple(int(part) for part in (self.version or "").split("."))
        except ValueError:
            return None

    @property
    def too_old(self) -> bool:
        version = self.version_tuple
        return version is not None and version[:2] < OLDEST_PATIENT_PYTHON


@dataclass(frozen=True)
class TorchDevice:
    index: int
    name: str
    capability: tuple[int, int]
    total_memory_bytes: int


@dataclass(frozen=True)
class TorchFacts:
    importable: bool
    import_error: str | None = None
    version: str | None = None
    cuda_version: str | None = None  # torch.version.cuda: the runtime the wheel was built for
    hip_version: str | None = None
    cudnn_version: int | None = None
    arch_list: tuple[str, ...] = ()
    cuda_available: bool = False
    device_count: int = 0
    devices: tuple[TorchDevice, ...] = ()
    distributed_available: bool = False
    nccl_available: bool = False
    gloo_available: bool = False
    nccl_version: str | None = None
    cuda_error: str | None = None  # why CUDA could not be initialised, if it could not
    location: str | None = None  # the folder torch was imported from
    debug_build: bool = False
    xpu_available: bool = False
    xnnpack_available: bool = False

    @property
    def major_minor(self) -> tuple[int, int] | None:
        return parse_major_minor(self.version)


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str | None
    used_memory_bytes: int | None


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_total_bytes: int
    memory_used_bytes: int
    compute_capability: tuple[int, int] | None = None
    mig_mode: bool | None = None  # None: the GPU does not support MIG
    mig_devices: tuple[str, ...] = ()  # MIG-... UUIDs of the slices
    compute_mode: str = "default"  # default, exclusive-thread, prohibited, exclusive-process
    ecc_uncorrectable_volatile: int | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class NvmlFacts:
    driver_version: str
    cuda_driver_version: str | None  # the newest CUDA the driver supports, e.g. "12.4"
    gpus: tuple[GpuFacts, ...] = ()


@dataclass(frozen=True)
class EnvFacts:
    """The variables that steer CUDA, NCCL, gloo and the launcher, as they were set."""

    variables: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> str | None:
        return self.variables.get(name)


@dataclass(frozen=True)
class PlanFacts:
    """What the user asked `run` to do, so that a replayed report is judged the same way."""

    nproc: int | None = None
    backend: str | None = None
    require_gpu: bool = False
    min_busbw_gbps: float | None = None
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    jobs: bool = True
    sizes: str | None = None
    iters: int | None = None
    timeout_s: float | None = None
    python: str | None = None  # --python as given; the python probe says which one ran
    ops: tuple[str, ...] = ()  # collectives to sweep; empty: all_reduce only
    nodes: NodePlan | None = None  # a multi-node run; None: this machine alone
    as_is: bool = False  # --as-is: no predicted fix is applied to the job

    @property
    def nnodes(self) -> int:
        return self.nodes.nnodes if self.nodes else 1


def parse_major_minor(version: str | None) -> tuple[int, int] | None:
    """'2.13.0+cpu' -> (2, 13); '12.4' -> (12, 4); None or junk -> None."""
    if not version:
        return None
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


@dataclass(frozen=True)
class CollectEnvFacts:
    """What `python -m torch.utils.collect_env` reports beyond the other probes, read in the
    patient (patient/collect_env.py); None: could not be read there."""

    gcc: str | None = None
    clang: str | None = None
    cmake: str | None = None
    nvcc: str | None = None  # the CUDA toolkit on PATH, not the runtime torch was built for
    os: str | None = None
    libc: str | None = None
    python_build: str | None = None
    python_platform: str | None = None
    pip_packages: Mapping[str, str] = field(default_factory=dict)  # torch's list of names
    conda_packages: Mapping[str, str] | None = None  # None: no conda env
    allocator: Mapping[str, str] = field(default_factory=dict)  # PYTORCH_CUDA_ALLOC_CONF ...
    cpu_model: str | None = None
    cpu_flags: tuple[str, ...] = ()
    numa_nodes: int | None = None
    numa_cpus: Mapping[str, str] = field(default_factory=dict)
    cpu_caches: Mapping[str, str] = field(default_factory=dict)
    lscpu: Mapping[str, str] = field(default_factory=dict)  # every field, as collect_env prints


FACT_TYPES: dict[str, type] = {
    "collect_env": CollectEnvFacts,
    "host": HostFacts,
    "python": PythonFacts,
    "torch": TorchFacts,
    "nvml": NvmlFacts,
    "topology": TopologyFacts,
    "env": EnvFacts,
    "plan": PlanFacts,
    "job": JobFacts,
    "dataparallel": DataParallelFacts,
    "trace": TraceFacts,
    "network": NetworkFacts,
    "cluster": ClusterFacts,
    "attach": AttachFacts,
}


@dataclass(frozen=True)
class FactSet:
    """All probe results of one run, as the rules see them."""

    results: Mapping[str, ProbeResult]

    @classmethod
    def of(cls, results: list[ProbeResult] | tuple[ProbeResult, ...]) -> FactSet:
        return cls({r.probe: r for r in results})

    def facts(self, probe: str) -> Any:
        """The probe's facts; a failed probe may still carry what it did measure."""
        result = self.results.get(probe)
        return result.facts if result is not None else None

    @property
    def host(self) -> HostFacts | None:
        return self.facts("host")

    @property
    def python(self) -> PythonFacts | None:
        return self.facts("python")

    @property
    def torch(self) -> TorchFacts | None:
        return self.facts("torch")

    @property
    def nvml(self) -> NvmlFacts | None:
        return self.facts("nvml")

    @property
    def topology(self) -> TopologyFacts | None:
        return self.facts("topology")

    @property
    def env(self) -> EnvFacts:
        return self.facts("env") or EnvFacts()

    @property
    def job(self) -> JobFacts | None:
        return self.facts("job")

    @property
    def dataparallel(self) -> DataParallelFacts | None:
        return self.facts("dataparallel")

    @property
    def trace(self) -> TraceFacts | None:
        return self.facts("trace")

    @property
    def plan(self) -> PlanFacts:
        return self.facts("plan") or PlanFacts()

    @property
    def network(self) -> NetworkFacts | None:
        return self.facts("network")

    @property
    def cluster(self) -> ClusterFacts | None:
        return self.facts("cluster")

    @property
    def attach(self) -> AttachFacts | None:
        return self.facts("attach")
