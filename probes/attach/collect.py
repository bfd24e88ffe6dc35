"""`attach`'s measurements: find the job, then sample every rank a few times, `interval_s`
apart (state, CPU time, wait channel, children, and stacks through py-spy), all within the
time limit. Nothing is sent to the job: no signal, no write, nothing installed."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from ddp_doctor.facts.attach import (
    AttachedRank,
    AttachFacts,
    PtraceAccess,
    RankGpu,
    RankSample,
    RasFacts,
    SourceStatus,
)
from ddp_doctor.probes.attach import (
    debug_server,
    flightrec,
    procstate,
    ras,
    recorder_pace,
    stacks,
)
from ddp_doctor.probes.attach.processes import (
    Candidate,
    FoundJob,
    find_jobs,
    job_below,
    job_for,
    scan,
)

CAP_SYS_PTRACE = 19
PY_SPY_TIMEOUT_S = 5.0  # one stack read of one rank
MAX_PARALLEL = 8
DEBUG_SERVER_TIMEOUT_S = 10.0  # the frontend itself waits for every rank's worker
RAS_TIMEOUT_S = 10.0  # RAS itself waits up to 5 s for each other process (its leg timeout)


class AttachError(Exception):
    """No job to attach to, or several and none chosen: one line for the user."""


@dataclass(frozen=True)
class AttachRequest:
    target: str | None = None  # a pid (agent or rank) or a job id
    interval_s: float = 3.0
    samples: int = 2
    timeout_s: float = 30.0
    native: bool = False


def choose_job(
    request: AttachRequest,
    jobs: Sequence[FoundJob],
    processes: Mapping[int, Candidate] | None = None,
) -> FoundJob:
    if not jobs:
        raise AttachError(
            "no distributed training job found on this host (no torchrun, accelerate, "
            "deepspeed or mp.spawn process, and no process with RANK and WORLD_SIZE set)"
        )
    if request.target is not None:
        job = job_for(list(jobs), request.target) or job_below(
            list(jobs), request.target, processes or {}
        )
        if job is None:
            raise AttachError(f"{request.target} is neither a job id nor a pid of a job's process")
        return job
    if len(jobs) > 1:
        listed = "; ".join(f"{j.job_id} ({j.launcher}, {len(j.ranks)} ranks)" for j in jobs)
        raise AttachError(f"{len(jobs)} jobs on this host, choose one with --job: {listed}")
    return jobs[0]


def collect_attach(request: AttachRequest, say: Callable[[str], None]) -> AttachFacts:
    started = time.monotonic()
    processes = scan()
    job = choose_job(request, find_jobs(processes), processes)
    if not job.ranks:
        who = f"its launcher (pid {job.agent.pid})" if job.agent else "it"
        raise AttachError(
            f"job {job.job_id}: {who} has no rank running now (starting, restarting between "
            "attempts, or ending): nothing to attach to; attach again in a few seconds"
        )
    py_spy = stacks.find_py_spy()
    say(f"attach: {len(job.ranks)} ranks of {job.job_id}, sampling")
    ranks = tuple(_rank(found.process, found.rank, found.rank_from) for found in job.ranks)
    gpus, gpu_source = _gpus()
    ranks = tuple(replace(r, gpus=gpus.get(r.pid, ())) for r in ranks)
    samples = _sample_all(ranks, request, py_spy, started)
    ranks = tuple(replace(r, samples=samples[r.pid]) for r in ranks)
    left = request.timeout_s - (time.monotonic() - started)
    ranks, recorder_source = _flight_recorders(ranks, left)
    left = request.timeout_s - (time.monotonic() - started)
    ranks, debug_source = _debug_server(ranks, max(0.5, left))
    ras, ras_source = _ras(ranks, max(0.5, request.timeout_s - (time.monotonic() - started)))
    others = tuple(j.job_id for j in find_jobs(processes) if j.job_id != job.job_id)
    return AttachFacts(
        hostname=socket.gethostname(),
        job_id=job.job_id,
        launcher=job.launcher,
        agent_pid=job.agent.pid if job.agent else None,
        agent_cmdline=job.agent.cmdline if job.agent else "",
        interval_s=request.interval_s,
        sample_count=request.samples,
        py_spy=py_spy,
        native=request.native,
        access=ptrace_access(),
        ranks=ranks,
        other_jobs=others,
        sources=(gpu_source, recorder_source, debug_source, ras_source),
        ras=ras,
        duration_s=round(time.monotonic() - started, 3),
    )


def _rank(process: Candidate, rank: int | None, rank_from: str) -> AttachedRank:
    env = process.env
    state = procstate.read_state(process.pid)
    peers, listening = procstate.sockets(process.pid)
    return AttachedRank(
        pid=process.pid,
        rank=rank,
        rank_from=rank_from,
        host=socket.gethostname(),
        local_rank=_int(env.get("LOCAL_RANK") or env.get("SLURM_LOCALID")),
        world_size=_int(env.get("WORLD_SIZE") or env.get("SLURM_NTASKS")),
        group_rank=_int(env.get("GROUP_RANK") or env.get("SLURM_NODEID")),
        master_addr=env.get("MASTER_ADDR"),
        master_port=_int(env.get("MASTER_PORT")),
        user=process.user,
        cmdline=process.cmdline,
        env=dict(sorted(env.items())),
        env_readable=process.env_readable,
        threads=state.threads,
        rss_bytes=state.rss_bytes,
        peers=peers,
        store=_store_of(peers, _int(env.get("MASTER_PORT"))),
        listening=listening,
    )


def _store_of(peers: Sequence[str], port: int | None) -> str | None:
    return next((p for p in peers if port is not None and p.rsplit(":", 1)[-1] == str(port)), None)


def _sample_all(
    ranks: Sequence[AttachedRank], request: AttachRequest, py_spy: str | None, started: float
) -> dict[int, tuple[RankSample, ...]]:
    taken: dict[int, list[RankSample]] = {r.pid: [] for r in ranks}
    first = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(ranks)))) as pool:
        for index in range(max(1, request.samples)):
            due = first + index * request.interval_s
            left = request.timeout_s - (time.monotonic() - started)
            if index and due + PY_SPY_TIMEOUT_S - started > request.timeout_s:
                break  # another sample would not fit the time limit
            time.sleep(max(0.0, due - time.monotonic()))
            bound = max(0.5, min(PY_SPY_TIMEOUT_S, left))
            jobs = [pool.submit(_sample, r.pid, py_spy, bound, request, first) for r in ranks]
            for rank, future in zip(ranks, jobs, strict=True):
                taken[rank.pid].append(future.result())
    return {pid: tuple(samples) for pid, samples in taken.items()}


def _sample(
    pid: int, py_spy: str | None, timeout_s: float, request: AttachRequest, first: float
) -> RankSample:
    at = round(time.monotonic() - first, 3)
    state = procstate.read_state(pid)
    children = procstate.children(pid)
    if state.state in (procstate.GONE, "zombie"):
        return RankSample(at, state.state, state.cpu_s, state.wchan, children=children)
    if py_spy is None:
        dumped = stacks.Dump(error="py-spy is not installed beside ddp-doctor nor on PATH")
    else:
        dumped = stacks.dump(py_spy, pid, timeout_s, request.native)
    return RankSample(
        at_s=at,
        state=state.state,
        cpu_s=state.cpu_s,
        wchan=state.wchan,
        main_cpu_s=state.main_cpu_s,
        main_switches=state.main_switches,
        threads=dumped.threads,
        stacks_error=dumped.error,
        children=children,
        counters=dumped.counters,
    )


def ptrace_access() -> PtraceAccess:
    return PtraceAccess(
        doctor_uid=os.getuid(),
        yama_scope=_yama_scope(),
        cap_sys_ptrace=_has_capability(CAP_SYS_PTRACE),
        in_container=os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"),
    )


def _yama_scope() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    except (OSError, ValueError):
        return None


def _has_capability(bit: int) -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _gpus() -> tuple[dict[int, tuple[RankGpu, ...]], SourceStatus]:
    from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped
    from ddp_doctor.probes.nvml import collect_nvml

    try:
        nvml = collect_nvml()
    except (ProbeSkipped, ProbeFailed) as error:
        return {}, SourceStatus("nvml", "unavailable", str(error))
    by_pid: dict[int, list[RankGpu]] = {}
    for gpu in nvml.gpus:
        for process in gpu.processes:
            by_pid.setdefault(process.pid, []).append(
                RankGpu(gpu.index, gpu.uuid or "", process.used_memory_bytes)
            )
    return {pid: tuple(g) for pid, g in by_pid.items()}, SourceStatus("nvml", "read")


def _flight_recorders(
    ranks: tuple[AttachedRank, ...], timeout_s: float
) -> tuple[tuple[AttachedRank, ...], SourceStatus]:
    recorders = [
        flightrec.RankRecorder(r.pid, r.rank, r.env)
        for r in ranks
        if r.rank is not None and flightrec.RankRecorder(r.pid, r.rank, r.env).dump is not None
    ]
    if not recorders:
        note = "the job enabled no flight recorder (TORCH_FR_BUFFER_SIZE) nor dump file"
        return ranks, SourceStatus("flight-recorder", "not-set", note)
    found = flightrec.collect(recorders, max(0.5, timeout_s))
    paces = {
        r.pid: recorder_pace.recent_pace(r.dump)
        for r in recorders
        if r.pid in found and found[r.pid][1] == flightrec.FRESH
    }
    updated = tuple(
        replace(
            r,
            flight_recorder=found[r.pid][0],
            flight_recorder_from=found[r.pid][1],
            flight_recorder_pace=paces.get(r.pid),
        )
        if r.pid in found
        else r
        for r in ranks
    )
    read = [r for r in updated if r.flight_recorder]
    notes = sorted({r.flight_recorder_from for r in updated if r.pid in found})
    status = "read" if read else "unavailable"
    return updated, SourceStatus(
        "flight-recorder", status, f"{len(read)} ranks: " + "; ".join(notes)
    )


def _debug_server(
    ranks: tuple[AttachedRank, ...], timeout_s: float
) -> tuple[tuple[AttachedRank, ...], SourceStatus]:
    """The flight records of torch's debug server, for the ranks that have none yet."""
    ports = debug_server.frontend_ports([r.pid for r in ranks])
    if not ports:
        return ranks, SourceStatus("debug-server", "not-set", "the job started no debug server")
    errors = []
    for port in ports:
        try:
            records = debug_server.ranks_read(port, min(timeout_s, DEBUG_SERVER_TIMEOUT_S))
        except debug_server.DebugServerError as error:
            errors.append(str(error))
            continue
        updated = tuple(
            replace(
                r,
                flight_recorder=records[r.rank][0],
                flight_recorder_from="torch debug server",
                flight_recorder_pace=records[r.rank][1],
            )
            if not r.flight_recorder and r.rank in records
            else r
            for r in ranks
        )
        return updated, SourceStatus("debug-server", "read", f"port {port}: {len(records)} ranks")
    return ranks, SourceStatus("debug-server", "failed", "; ".join(errors))


def _ras(ranks: Sequence[AttachedRank], timeout_s: float) -> tuple[RasFacts | None, SourceStatus]:
    """NCCL RAS, where a rank of the job listens on its address (never a port the job does
    not serve)."""
    wanted = next((r.env["NCCL_RAS_ADDR"] for r in ranks if r.env.get("NCCL_RAS_ADDR")), None)
    try:
        host, port = ras.address_of(wanted)
    except ras.RasError as error:
        return None, SourceStatus("nccl-ras", "failed", str(error))
    if not any(port in r.listening for r in ranks):
        note = f"no rank listens on {host}:{port} (gloo, NCCL before 2.24, or NCCL_RAS_ENABLE=0)"
        return None, SourceStatus("nccl-ras", "not-set", note)
    try:
        answer = ras.query(host, port, min(timeout_s, RAS_TIMEOUT_S))
    except ras.RasError as error:
        return None, SourceStatus("nccl-ras", "failed", str(error))
    return answer, SourceStatus("nccl-ras", "read", f"{host}:{port}, NCCL {answer.nccl_version}")


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None
