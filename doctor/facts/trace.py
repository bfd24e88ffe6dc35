"""What `trace` saw of the user's run: per rank, what the monitor recorded, how the rank ended,
and, when the run hung, where every rank stood. Facts only; the rules judge them, and they
round-trip through JSON (`diagnose` re-judges a saved trace)."""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.facts.collectives import CollectiveCall


@dataclass(frozen=True)
class Site:
    """A place in the user's code (the innermost frame outside torch and the stdlib)."""

    path: str
    line: int
    function: str = ""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class InitRecord:
    ok: bool
    backend: str | None = None
    world_size: int | None = None
    rank: int | None = None
    timeout_s: float | None = None  # as passed; None: torch's default
    init_method: str | None = None
    rank_given: bool = False  # rank= or world_size= passed (not read from the environment)
    seconds: float | None = None
    error: str | None = None
    current_device: str | None = None
    uuid: str | None = None
    site: Site | None = None


@dataclass(frozen=True)
class DeviceRecord:
    """A torch.cuda.set_device call: what was asked, and the device current after it."""

    device: str
    current_device: str | None = None
    uuid: str | None = None
    site: Site | None = None


@dataclass(frozen=True)
class DdpRecord:
    ident: int
    device_ids: tuple[int, ...] | None = None  # DDP's own normalised device_ids
    output_device: int | None = None
    module_device: str | None = None
    current_device: str | None = None
    uuid: str | None = None
    find_unused_parameters: bool = False
    static_graph: bool = False
    parameters: int = 0
    constructed: bool = True  # False: DDP's constructor raised (seen before it ran)
    unused: tuple[str, ...] | None = None  # no gradient after the first backward; None: unseen
    unused_count: int = 0
    site: Site | None = None


@dataclass(frozen=True)
class DataParallelRecord:
    ident: int
    device_ids: tuple[int, ...] = ()
    output_device: int | None = None
    module_device: str | None = None
    output_devices: tuple[str, ...] = ()  # where the first forward's outputs landed
    site: Site | None = None


@dataclass(frozen=True)
class SamplerRecord:
    ident: int
    shuffle: bool
    num_replicas: int | None = None
    rank: int | None = None
    drop_last: bool = False
    dataset_size: int | None = None
    epochs: tuple[int | None, ...] = ()  # sampler.epoch at each __iter__
    site: Site | None = None


@dataclass(frozen=True)
class LoaderRecord:
    ident: int
    sampler_kind: str
    sampler: int | None = None  # the DistributedSampler's ident, when it is one
    dataset_size: int | None = None
    batch_size: int | None = None
    num_workers: int | None = None
    iterations: int = 0
    trained: bool = False  # an optimizer step ran while this loader was the last iterated
    site: Site | None = None


@dataclass(frozen=True)
class SaveRecord:
    target: str  # an absolute path, or the type of the file object
    is_path: bool
    site: Site | None = None


@dataclass(frozen=True)
class LoadRecord:
    target: str
    map_location: str | None = None
    devices: tuple[str, ...] = ()  # devices of the loaded tensors
    current_device: str | None = None
    site: Site | None = None


@dataclass(frozen=True)
class SyncBatchNormRecord:
    on_ddp: bool  # the converted module is, or sits inside, a DDP-wrapped module
    site: Site | None = None


@dataclass(frozen=True)
class RankException:
    type: str
    message: str
    site: Site | None = None  # the user's innermost frame
    frames: tuple[Site, ...] = ()  # innermost last, as a traceback prints them


@dataclass(frozen=True)
class RankTrace:
    rank: int
    pid: int
    host: str = ""
    local_rank: int | None = None
    world_size: int | None = None
    started: float = 0.0  # time.time() at the monitor's start
    torch_version: str | None = None
    cuda_build: str | None = None
    # returned, bound, exception, exit, stopped (by the doctor), or unknown (killed)
    end: str = "unknown"
    end_detail: str | None = None  # the bound, the exit code of sys.exit
    exit_code: int | None = None  # as torchrun (or the process) reported it
    exception: RankException | None = None
    steps: int = 0
    epochs: int = 0
    collectives: int = 0  # collectives the wrappers saw issued
    init: InitRecord | None = None
    set_devices: tuple[DeviceRecord, ...] = ()
    ddp: tuple[DdpRecord, ...] = ()
    dataparallel: tuple[DataParallelRecord, ...] = ()
    samplers: tuple[SamplerRecord, ...] = ()
    loaders: tuple[LoaderRecord, ...] = ()
    saves: tuple[SaveRecord, ...] = ()
    loads: tuple[LoadRecord, ...] = ()
    syncbn: tuple[SyncBatchNormRecord, ...] = ()
    # The monitor's wrappers: the first K collectives, then the last K after those (with the
    # call site); torch's flight recorder where it was on: its first and last K entries (with
    # DDP's own all-reduces, which never pass the wrappers).
    collectives_first: tuple[CollectiveCall, ...] = ()
    collectives_last: tuple[CollectiveCall, ...] = ()
    flight_recorder_first: tuple[CollectiveCall, ...] = ()
    flight_recorder_last: tuple[CollectiveCall, ...] = ()
    monitor_errors: tuple[str, ...] = ()
    restarts: int = 0  # earlier processes of this rank (torchrun --max-restarts)


@dataclass(frozen=True)
class RankSnapshot:
    """One rank when the doctor collected forensics (a hang, or the time limit)."""

    rank: int
    answered: bool  # the monitor thread answered (flight recorder, pending call)
    frames: tuple[Site, ...] = ()  # the main thread's stack from faulthandler, innermost first
    where: Site | None = None  # the user's innermost frame in it
    waiting: str | None = None  # collective, backward (DDP's all-reduce), or None
    # The wrapped call the main thread is in, numbered as the flight recorder numbers it where
    # the recorder holds it (the wrappers count only the script's own calls).
    pending: CollectiveCall | None = None
    flight_recorder: tuple[CollectiveCall, ...] = ()  # its entries then, pending ones marked
    exited: bool = False  # the rank was already gone


@dataclass(frozen=True)
class Forensics:
    reason: str  # hang or timeout
    after_s: float  # seconds into the run
    quiet_s: float  # seconds without progress on any rank
    ranks: tuple[RankSnapshot, ...] = ()


@dataclass(frozen=True)
class RankGuardCheck:
    """`check`'s collective-under-rank-guard analysis (DDP120) of one of the user's files the
    ranks stood in, run when the trace ran: rules read facts, never files, so `diagnose` of a
    saved trace finds what the trace found."""

    path: str  # as the sites name it (relative to the run's folder)
    lines: tuple[int, ...] = ()  # lines of collectives `check` finds under a rank guard
    error: str | None = None  # why the file could not be analysed


@dataclass(frozen=True)
class TraceFacts:
    command: str  # as typed after --, one string (so redaction sees --flag value pairs)
    launcher: str  # torchrun or python
    python: str = ""
    entry: str = "script"  # script, module, or no-python
    target: str = ""
    expected_ranks: int | None = None  # local ranks torchrun was asked for
    steps: int | None = None
    epochs: int | None = None
    timeout_s: float = 0.0
    hang_after_s: float = 0.0
    flight_recorder: str = "off"  # off, on, or on (set by the doctor)
    launched: bool = True
    not_launched_reason: str | None = None
    outcome: str = "finished"  # finished, hang, timeout
    exit_code: int | None = None
    duration_s: float = 0.0
    ranks: tuple[RankTrace, ...] = ()
    forensics: Forensics | None = None
    output_tail: str = ""
    rank_guard_checks: tuple[RankGuardCheck, ...] = ()  # files of the sites in forensics

    def rank(self, number: int) -> RankTrace | None:
        return next((r for r in self.ranks if r.rank == number), None)
