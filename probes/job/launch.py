"""Starts the one torchrun job, bounds it, and turns the ranks' journals into JobFacts.

Bounds, from what torch does on failure (lab notes): a taken port or an unresolvable master
makes ranks wait far past their timeout, so both are checked before launch; the whole job is
killed (ranks included, they run in sessions of their own) when `timeout_s` passes.
"""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ddp_doctor.facts.job import JobFacts, Preflight
from ddp_doctor.probes.job.exchange import ClusterExchange
from ddp_doctor.probes.job.payload import PACKAGE, install_payload, patient_environment
from ddp_doctor.probes.job.rendezvous import Rendezvous, rendezvous_args, single_node_args
from ddp_doctor.probes.job.results import (
    bandwidth_errors_of,
    collect_ranks,
    identities_of,
    inter_node_rows_of,
    local_rank_numbers,
    node_bandwidth_of,
    peer_access_of,
    rows_of,
    torch_exit_codes,
)
from ddp_doctor.probes.runner import die_with_parent, has_exited, kill_group, owned_folder, tracked
from ddp_doctor.readings.nccl_debug import without_doctor_env

OUTPUT_TAIL_BYTES = 64 * 1024
Progress = Callable[[str], None]
# Called at every poll of the running job with the stage rank 0 is in (None between stages):
# how the PCIe links are sampled under load without any work inside the ranks.
StageWatcher = Callable[[str | None], None]


@dataclass(frozen=True)
class JobConfig:
    nproc: int
    backend: str = "auto"  # auto lets each rank pick nccl (GPUs and NCCL) or gloo
    master_addr: str = "127.0.0.1"
    master_port: int | None = None
    sizes: str = "1K:16M:4"
    iters: int = 10
    ops: tuple[str, ...] = ("all_reduce",)
    timeout_s: float = 60.0
    init_timeout_s: float = 10.0
    python: str = sys.executable  # the patient's interpreter: torchrun and the ranks run in it
    rendezvous: Rendezvous | None = None  # one node of several; None: this machine alone
    # variables set for the job only, to check a fix the network preflight predicted
    extra_env: Mapping[str, str] = field(default_factory=dict)
    exchange_timeout_s: float = 10.0  # each wait of the multi-node exchange (cluster_share.py)
    isolate_s: float = 0.0  # run --isolate: the pair tests' budget (patient/isolate.py); 0: none
    isolate_slow_below: float = 0.5  # of round 1's median: a slower pair is slow
    # variables the doctor sets for its own job's sake (NCCL_DEBUG=INFO for the ladder's NCCL
    # rungs, readings/nccl_debug.py); never a user's own: those are left out of it
    doctor_env: Mapping[str, str] = field(default_factory=dict)
    nccl_logging: str | None = None  # who decides NCCL's logging where the doctor set nothing


def preflight(
    config: JobConfig, nccl_missing: bool = False, master_unreachable: str | None = None
) -> Preflight:
    address, resolve_error = resolve(config.master_addr)
    port, port_error, route_error = config.master_port, None, None
    listens_here = config.rendezvous is None or config.rendezvous.is_host
    if address is not None and listens_here:
        port, port_error = claim_port(address, config.master_port)
    if address is not None:
        route_error = route_problem(address, port)
    return Preflight(
        config.master_addr,
        address,
        resolve_error,
        port,
        port_error,
        nccl_missing,
        route_error=route_error,
        master_unreachable=master_unreachable,
    )


def resolve(host: str, timeout_s: float = 5.0) -> tuple[str | None, str | None]:
    """getaddrinfo in a thread, so that a stuck resolver cannot hold the doctor."""
    outcome: list[tuple[str | None, str | None]] = []

    def lookup() -> None:
        try:
            outcome.append((socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0], None))
        except (OSError, UnicodeError) as error:
            outcome.append((None, f"{type(error).__name__}: {error}"))

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else (None, f"no answer from the resolver in {timeout_s:g} s")


def claim_port(address: str, port: int | None) -> tuple[int | None, str | None]:
    """The asked port (or a free one) if it can be listened on, else why not.

    bind() on the master address says whether it is this machine's; torchrun's store then
    listens on every interface, so the port must be free on the wildcard address too.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    wildcard = "::" if family == socket.AF_INET6 else ""
    for host in (address, wildcard):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore does
            try:
                probe.bind((host, port or 0))
            except OSError as error:
                name = errno.errorcode.get(error.errno or 0, "error")
                return port, f"{name}: cannot listen on {host or '*'}:{port or 0}: {error.strerror}"
            port = probe.getsockname()[1]
    return port, None


UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH)


def route_problem(address: str, port: int | None) -> str | None:
    """Why the kernel has no route to the master, or None: a UDP connect() only looks the
    route up, nothing is sent. With no interface up, even 127.0.0.1 is unreachable."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((address, port or 9))
        except OSError as error:
            if error.errno in UNREACHABLE:
                name = errno.errorcode.get(error.errno or 0, "error")
                return f"{name}: {error.strerror} (to {address})"
    return None


def run_job(
    config: JobConfig,
    checks: Preflight,
    progress: Progress | None = None,
    watcher: StageWatcher | None = None,
    exchange: ClusterExchange | None = None,
) -> JobFacts:
    """`watcher`: told rank 0's stage at every poll (PCIe sampling under load); `exchange`:
    the doctor's side of a multi-node job's exchange through the store."""
    base = planned_facts(config, checks)
    reason = _reason_not_to_launch(checks)
    if reason:
        return JobFacts(launched=False, not_launched_reason=reason, **base)
    try:
        workdir = Path(tempfile.mkdtemp(prefix="ddp-doctor-job-"))
    except OSError as error:
        return _not_started(base, f"no temporary folder for the job: {error.strerror or error}")
    try:
        with owned_folder(workdir):  # removed on every way out, a signal included
            return _launch_and_collect(config, checks, workdir, base, progress, (watcher, exchange))
    except LaunchFailed as failed:
        return _not_started(base, str(failed))


class LaunchFailed(Exception):
    """The doctor could not start torchrun: its own failure, not the patient's."""


def _not_started(base: dict, why: str) -> JobFacts:
    return JobFacts(launched=False, not_launched_reason=why, launch_error=why, **base)


def planned_facts(config: JobConfig, checks: Preflight) -> dict[str, object]:
    """The JobFacts fields the plan fixes before anything runs."""
    return dict(
        preflight=checks,
        backend=config.backend,
        nproc=config.nproc,
        init_timeout_s=config.init_timeout_s,
        timeout_s=config.timeout_s,
        sizes=config.sizes,
        iters=config.iters,
        nnodes=config.rendezvous.nnodes if config.rendezvous else 1,
        applied_fixes=dict(config.extra_env),
        doctor_env=dict(config.doctor_env),
        nccl_logging=config.nccl_logging,
    )


def _reason_not_to_launch(checks: Preflight) -> str | None:
    if checks.resolve_error:
        return f"master address {checks.master_addr!r} does not resolve"
    if checks.port_error:
        return f"master port unusable ({checks.port_error})"
    if checks.nccl_missing:
        return "--backend nccl, but this torch has no NCCL"
    if checks.route_error:
        return f"no route to the master address ({checks.route_error})"
    return checks.master_unreachable


def torchrun_argv(
    config: JobConfig,
    port: int,
    journal_dir: Path,
    workdir: Path,
    cluster_dir: Path | None = None,
) -> list[str]:
    if config.rendezvous is None:
        rendezvous = single_node_args(config.master_addr, port, config.init_timeout_s)
    else:
        rendezvous = rendezvous_args(config.rendezvous)
    argv = [
        config.python,
        "-m",
        "torch.distributed.run",
        *rendezvous,
        "--log-dir",
        str(workdir / "torchrun"),
        "--nproc-per-node",
        str(config.nproc),
        "--max-restarts",
        "0",
        "--monitor-interval",
        "0.1",
        "-m",
        PACKAGE,  # its __main__ runs worker.py
        "--out",
        str(journal_dir),
        "--backend",
        config.backend,
        "--init-timeout",
        f"{config.init_timeout_s:g}",
        "--sizes",
        config.sizes,
        "--iters",
        str(config.iters),
        "--ops",
        ",".join(config.ops),
    ]
    if cluster_dir is not None:
        argv += ["--cluster-dir", str(cluster_dir)]
        argv += ["--exchange-timeout", f"{config.exchange_timeout_s:g}"]
    if config.isolate_s > 0:
        argv += ["--isolate-s", f"{config.isolate_s:g}"]
        argv += ["--isolate-slow-below", f"{config.isolate_slow_below:g}"]
    return argv


# torchrun reads its own options from these too (a Kubeflow pod sets them): the doctor's job
# must not join the pod's rendezvous.
LAUNCHER_PREFIXES = ("PET_", "TORCHELASTIC_")


def job_environment(workdir: Path) -> dict[str, str]:
    import os

    # The user's NCCL_*, GLOO_* and CUDA_* settings are what the job tests: keep them.
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun would set, without its banner
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(workdir)  # whatever a rank writes to temp goes with the job's folder
    return env


def _launch_and_collect(
    config: JobConfig,
    checks: Preflight,
    workdir: Path,
    base: dict,
    progress: Progress | None,
    followers: tuple[StageWatcher | None, ClusterExchange | None],
) -> JobFacts:
    watcher, exchange = followers
    journals = workdir / "ranks"
    output_path = workdir / "torchrun.log"
    try:
        journals.mkdir()
        payload = install_payload(workdir / "payload")
        cluster_dir = exchange.prepare(workdir / "cluster") if exchange else None
        output = output_path.open("wb")
    except OSError as error:
        raise LaunchFailed(f"cannot prepare the job's folder: {error.strerror or error}") from None
    argv = torchrun_argv(config, checks.master_port or 0, journals, workdir, cluster_dir)
    environment = {**job_environment(workdir), **config.doctor_env, **config.extra_env}
    started = time.monotonic()
    with output:
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=patient_environment(environment, payload, workdir),
                cwd=workdir,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # torchrun dies with the doctor, even by SIGKILL
            )
        except OSError as error:  # the interpreter vanished, fork failed (EAGAIN, ENOMEM)
            raise LaunchFailed(f"cannot start {argv[0]}: {error.strerror or error}") from None
        with tracked(process, workdir):
            ended = _wait(process, config, journals, started, progress, (watcher, exchange))
    if exchange:
        exchange.finish()
    ended_at = time.time()
    output_tail, nccl_info = _output(output_path, config)
    numbers = local_rank_numbers(journals, config.nproc, config.rendezvous)
    ranks = collect_ranks(journals, numbers, torch_exit_codes(output_tail), ended_at)
    timed_out = ended == TIMED_OUT
    return JobFacts(
        launched=True,
        duration_s=round(time.monotonic() - started, 3),
        timed_out=timed_out,
        exit_code=process.returncode if ended == EXITED else None,
        ranks=ranks,
        identities=without_doctor_env(identities_of(ranks), lambda _: config.doctor_env),
        bandwidth=rows_of(ranks),
        bandwidth_errors=bandwidth_errors_of(ranks),
        peer_access=peer_access_of(ranks),
        node_bandwidth=node_bandwidth_of(ranks),
        inter_node_bandwidth=inter_node_rows_of(ranks),
        store_peers=tuple(exchange.store_peers) if exchange else (),
        output_tail=output_tail,
        nccl_info=nccl_info,
        **{**base, "backend": _backend_used(ranks) or config.backend},
    )


EXITED, TIMED_OUT, RELEASED = "exited", "timed-out", "released"


def _wait(
    process: subprocess.Popen,
    config: JobConfig,
    journals: Path,
    started: float,
    progress: Progress | None,
    followers: tuple[StageWatcher | None, ClusterExchange | None] = (None, None),
) -> str:
    """Waits for torchrun: EXITED, TIMED_OUT (killed at the deadline) or RELEASED (this node's
    ranks are done and torchrun only waits for another node's agent in its exit barrier)."""
    watcher, exchange = followers
    deadline = started + config.timeout_s
    try:
        while not has_exited(process):
            if time.monotonic() >= deadline:
                return TIMED_OUT
            if exchange:
                exchange.poll()
                if exchange.only_exit_barrier_left(process.pid):
                    return RELEASED
            if progress:
                progress(_progress_line(journals, config.nproc, time.monotonic() - started))
            if watcher:
                watcher(_current_stage(journals / "rank0.jsonl"))
            time.sleep(0.05)
        return EXITED
    finally:  # at the deadline, on Ctrl-C, and after a normal end: no rank outlives the job
        kill_group(process)
        process.wait()


def _progress_line(journals: Path, nproc: int, elapsed: float) -> str:
    from ddp_doctor.patient.journal import read_journal

    stages = []
    paths = sorted(journals.glob("rank*.jsonl"))
    for path in paths:
        records = [r for r in read_journal(path) if "stage" in r]
        stages.append(records[-1]["stage"] if records else "starting")
    stages += ["starting"] * (nproc - len(paths))
    summary = ", ".join(f"{stages.count(s)}x {s}" for s in dict.fromkeys(stages))
    return f"job: {nproc} ranks: {summary} ({elapsed:.1f} s)"


def _current_stage(journal: Path) -> str | None:
    from ddp_doctor.patient.journal import read_journal

    records = [r for r in read_journal(journal) if "stage" in r]
    last = records[-1] if records else None
    return str(last["stage"]) if last and last.get("event") == "start" else None


def _backend_used(ranks: tuple) -> str | None:
    for rank in ranks:
        record = rank.stage("init")
        if record and record.ended and record.ok:
            return str(record.data.get("backend"))
    return None


def _output(path: Path, config: JobConfig) -> tuple[str, tuple[str, ...]]:
    """The output's tail, and NCCL's INFO lines apart where the doctor asked for them."""
    if "NCCL_DEBUG" in config.doctor_env:
        from ddp_doctor.probes.job.nccl_lines import split_output

        return split_output(path, OUTPUT_TAIL_BYTES)
    return _tail(path), ()


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - OUTPUT_TAIL_BYTES))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""
