"""What `attach` saw of a job that was already running: its ranks on this host as /proc shows
them, and each rank's stacks, state and CPU time at a few moments some seconds apart. Facts
only; rules/attach.py judges them, and they round-trip through JSON, so `diagnose` re-judges
a saved attach report and merges the reports of several nodes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ddp_doctor.facts.collectives import CollectiveCall
from ddp_doctor.facts.trace import Site


@dataclass(frozen=True)
class ThreadStack:
    """One thread as py-spy read it; frames innermost first."""

    thread_id: int
    name: str = ""
    idle: bool = False  # py-spy: not running Python code (waiting in a call, or for the GIL)
    frames: tuple[Site, ...] = ()


@dataclass(frozen=True)
class LoopCounter:
    """An integer local of a frame of the main thread whose name says it counts steps (step,
    iteration, i, batch_idx ...), as py-spy's --locals read it: two samples of it give the
    step rate. No other local of the job is kept."""

    path: str
    function: str
    name: str
    value: int


@dataclass(frozen=True)
class ChildProcess:
    """A process the rank started itself (a DataLoader worker, a compile worker)."""

    pid: int
    state: str  # running, sleeping, disk-sleep, zombie, stopped, gone
    cmdline: str = ""
    cpu_s: float | None = None


@dataclass(frozen=True)
class RankSample:
    """One rank at one moment: what /proc says, and its stacks where ptrace allowed them."""

    at_s: float  # seconds after the first sample
    state: str  # as psutil names it: running, sleeping, disk-sleep, zombie, stopped, gone
    cpu_s: float | None = None  # user + system CPU time of the rank's own process
    wchan: str | None = None  # the kernel function a sleeping rank waits in
    main_cpu_s: float | None = None  # CPU time of the main thread alone
    main_switches: int | None = None  # the main thread's context switches (each wake-up)
    threads: tuple[ThreadStack, ...] = ()
    stacks_error: str | None = None  # why py-spy gave no stacks (its own words, one line)
    children: tuple[ChildProcess, ...] = ()
    counters: tuple[LoopCounter, ...] = ()  # the main thread's step counters, innermost first


@dataclass(frozen=True)
class RankGpu:
    index: int
    uuid: str = ""
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class RecorderPace:
    """How fast the rank's collectives of one process group went lately, from a flight-recorder
    dump written during this attach: from the first to the last of its last entries, so many
    collectives (sequence numbers) in so many seconds (their time_created_ns)."""

    group: str
    collectives: int
    span_s: float


@dataclass(frozen=True)
class AttachedRank:
    pid: int
    rank: int | None  # RANK, SLURM_PROCID, or the mp.spawn index
    rank_from: str = "RANK"  # which variable (or "spawn order") gave the rank
    host: str = ""
    local_rank: int | None = None
    world_size: int | None = None
    group_rank: int | None = None  # torchrun's node rank
    master_addr: str | None = None
    master_port: int | None = None
    user: str = ""
    cmdline: str = ""
    env: Mapping[str, str] = field(default_factory=dict)  # the distributed variables only
    env_readable: bool = True  # False: /proc/PID/environ was refused
    threads: int | None = None
    rss_bytes: int | None = None
    peers: tuple[str, ...] = ()  # "addr:port" of established TCP connections
    store: str | None = None  # the peer that is the rendezvous store (MASTER_PORT), if any
    listening: tuple[int, ...] = ()  # TCP ports the rank listens on
    gpus: tuple[RankGpu, ...] = ()
    samples: tuple[RankSample, ...] = ()
    # The rank's flight recorder (its last entries), from a dump the job wrote or one asked
    # for through its TORCH_NCCL_DEBUG_INFO_PIPE_FILE; how it was got, and why not.
    flight_recorder: tuple[CollectiveCall, ...] = ()
    flight_recorder_from: str = ""
    flight_recorder_pace: RecorderPace | None = None  # from a fresh dump only


@dataclass(frozen=True)
class RasRank:
    rank: int
    host: str = ""
    pid: int | None = None
    counts: Mapping[str, int] = field(default_factory=dict)  # collective -> how many done
    missing: bool = False  # in the communicator's missing ranks
    unresponsive: bool = False
    considered_dead: bool = False
    async_error: int = 0


@dataclass(frozen=True)
class RasCommunicator:
    """One NCCL communicator as NCCL's RAS (JSON, NCCL 2.28+) reports it."""

    hash: str
    size: int
    ranks: tuple[RasRank, ...] = ()


@dataclass(frozen=True)
class RasFacts:
    address: str
    nccl_version: str = ""
    communicators: tuple[RasCommunicator, ...] = ()


@dataclass(frozen=True)
class PtraceAccess:
    """Whether this doctor may read other processes' memory (py-spy needs it)."""

    doctor_uid: int
    yama_scope: int | None = None  # /proc/sys/kernel/yama/ptrace_scope; None: no yama
    cap_sys_ptrace: bool = False  # in the doctor's effective capabilities
    in_container: bool = False


@dataclass(frozen=True)
class SourceStatus:
    """One of the other sources of what the job knows (flight recorder, RAS, debug server):
    whether it was read, and why not."""

    name: str
    status: str  # read, not-set (the job did not enable it), unavailable, failed
    note: str = ""


@dataclass(frozen=True)
class AttachFacts:
    hostname: str
    job_id: str  # TORCHELASTIC_RUN_ID, SLURM job id, or the launcher's pid
    launcher: str  # torchrun, mp.spawn, slurm, accelerate, deepspeed, env
    agent_pid: int | None = None
    agent_cmdline: str = ""
    interval_s: float = 0.0
    sample_count: int = 0
    py_spy: str | None = None  # the py-spy used; None: not found
    native: bool = False
    access: PtraceAccess | None = None
    ranks: tuple[AttachedRank, ...] = ()
    other_jobs: tuple[str, ...] = ()  # the ids of jobs on this host not attached to
    sources: tuple[SourceStatus, ...] = ()
    ras: RasFacts | None = None
    nodes: tuple[str, ...] = ()  # hosts merged into these facts (diagnose of node reports)
    duration_s: float = 0.0

    def rank(self, number: int) -> AttachedRank | None:
        return next((r for r in self.ranks if r.rank == number), None)
