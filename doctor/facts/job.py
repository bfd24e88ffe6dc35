"""Facts from the launched torchrun job and the DataParallel probe."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

STAGES = ("init", "identity", "allreduce", "ddp", "bandwidth", "memory")
COLLECTIVE_STAGES = ("identity", "allreduce", "bandwidth", "ddp")


@dataclass(frozen=True)
class StageRecord:
    """One stage on one rank: started, and (if it got there) ended with ok or an error."""

    stage: str
    ended: bool = False
    ok: bool = False
    seconds: float | None = None
    error: str | None = None
    data: Mapping[str, object] = field(default_factory=dict)
    running_s: float | None = None  # a stage that never ended: how long it ran until the job ended


@dataclass(frozen=True)
class Identity:
    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int | None  # None in a folded report (facts/folding.py), where no rule needs it
    device: str  # "cpu" or "cuda:N"
    pci_bus_id: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    nccl_version: str | None = None
    driver_version: str | None = None
    cpu_affinity: str | None = None  # the CPUs the rank may run on, e.g. "0-55,112-167"
    torch_git_version: str | None = None
    python_version: str | None = None
    gpu_name: str | None = None
    nccl_libraries: tuple[str, ...] = ()  # every libnccl file mapped into the rank's process
    variables: Mapping[str, str] = field(default_factory=dict)  # NCCL_*, GLOO_*, CUDA_* ...
    group_rank: int | None = None  # the node's rank in torchrun's rendezvous


@dataclass(frozen=True)
class RankFacts:
    rank: int
    stages: tuple[StageRecord, ...] = ()
    exit_code: int | None = None  # torchrun's view: -N for a signal; None if unknown
    node_rank: int | None = None  # torchrun's group rank of the rank's node
    host: str | None = None

    def stage(self, name: str) -> StageRecord | None:
        return next((record for record in self.stages if record.stage == name), None)

    @property
    def last_started(self) -> StageRecord | None:
        return self.stages[-1] if self.stages else None


@dataclass(frozen=True)
class BandwidthRow:
    """One size of one collective's sweep, as nccl-tests prints it (GB = 1e9 bytes)."""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    op: str = "all_reduce"


@dataclass(frozen=True)
class PeerAccess:
    """torch.cuda.can_device_access_peer between two of rank 0's GPUs, by PCI bus id."""

    bus_id: str
    peer_bus_id: str
    can_access: bool


@dataclass(frozen=True)
class NodeBandwidth:
    """The all-reduce sweep inside one node (its ranks only), while every node ran its own."""

    node_rank: int
    host: str | None
    ranks: tuple[int, ...]
    rows: tuple[BandwidthRow, ...]


@dataclass(frozen=True)
class Preflight:
    """Checks made before anything is launched."""

    master_addr: str
    master_address: str | None = None  # what master_addr resolved to
    resolve_error: str | None = None
    master_port: int | None = None
    port_error: str | None = None  # bind() on the port failed with this
    nccl_missing: bool = False  # --backend nccl with a torch that has no NCCL
    route_error: str | None = None  # connecting to the master address is refused by routing
    master_unreachable: str | None = None  # another node: the master's port never answered


@dataclass(frozen=True)
class JobFacts:
    launched: bool
    preflight: Preflight
    backend: str | None = None  # what the ranks used ("auto" resolves inside the job)
    nproc: int = 0
    init_timeout_s: float = 0.0
    timeout_s: float = 0.0
    duration_s: float = 0.0
    timed_out: bool = False
    exit_code: int | None = None  # torchrun's own
    ranks: tuple[RankFacts, ...] = ()
    identities: tuple[Identity, ...] = ()
    bandwidth: tuple[BandwidthRow, ...] = ()
    bandwidth_errors: Mapping[str, str] = field(default_factory=dict)  # op -> why it has no rows
    peer_access: tuple[PeerAccess, ...] = ()
    output_tail: str = ""  # the end of torchrun's stdout and stderr, for the log patterns
    not_launched_reason: str | None = None
    sizes: str | None = None  # the sweep used, MIN:MAX:FACTOR
    iters: int | None = None
    launch_error: str | None = None  # the doctor itself could not start the job, and why
    nnodes: int = 1
    # variables the doctor set for the job to check a predicted fix (GLOO_SOCKET_IFNAME ...)
    applied_fixes: Mapping[str, str] = field(default_factory=dict)
    node_bandwidth: tuple[NodeBandwidth, ...] = ()  # several ranks per node: each node's own
    inter_node_bandwidth: tuple[BandwidthRow, ...] = ()  # one rank per node
    # where this node hosts torchrun's store: addresses seen connected to it during the job
    store_peers: tuple[str, ...] = ()
    # variables the doctor set for its own job's sake, not the user's (NCCL_DEBUG=INFO ...)
    doctor_env: Mapping[str, str] = field(default_factory=dict)
    # NCCL's INFO lines, kept apart from output_tail where the doctor asked for them: one per
    # distinct message, bounded (probes/job/nccl_lines.py)
    nccl_info: tuple[str, ...] = ()
    # who decided NCCL's logging where the doctor set nothing: "NCCL_DEBUG=WARN in /etc/nccl.conf"
    nccl_logging: str | None = None

    def rank(self, number: int) -> RankFacts | None:
        return next((r for r in self.ranks if r.rank == number), None)


@dataclass(frozen=True)
class DataParallelGpu:
    """One visible GPU as NVML sampled it while the DataParallel probe ran (about 20 samples
    a second, from before the probe's process started until it ended)."""

    nvml_index: int
    pci_bus_id: str  # nvmlPciInfo_t.busId
    device_id: int | None = None  # torch's index of this GPU; None: torch does not see it
    samples: int = 0
    memory_used_min_bytes: int | None = None  # nvmlMemory_t.used, lowest sample
    memory_used_max_bytes: int | None = None  # nvmlMemory_t.used, highest sample
    utilization_gpu_max_percent: int | None = None  # nvmlUtilization_t.gpu; None: unsupported


@dataclass(frozen=True)
class DataParallelFacts:
    device_ids: tuple[int, ...]
    output_device: int
    model_device: str
    output_on: str
    peak_allocated_bytes: tuple[int, ...]  # per device in device_ids, in that order
    error: str | None = None
    batch: int | None = None  # samples per step, scattered over device_ids
    steps: int | None = None
    forward_devices: tuple[int, ...] | None = None  # where a replica's forward ran; None: unknown
    device_bus_ids: tuple[str | None, ...] = ()  # PCI bus id of each device in device_ids
    parameter_bytes: int | None = None  # the model's parameters (the master copy on GPU 0)
    batch_bytes: int | None = None  # one input batch plus its gathered output
    gpus: tuple[DataParallelGpu, ...] = ()  # every visible GPU, as NVML saw it
    sampling_error: str | None = None  # why NVML could not sample, if it could not
