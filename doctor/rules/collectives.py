"""DDP301-DDP307: collectives that give wrong results, hang, or lose a rank (DDP303, a slow
one, is judged in bandwidth.py)."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.job import Identity
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, describe, rule
from ddp_doctor.rules.jobreading import (
    collective_stage,
    describe_exit,
    died_by_itself,
    rank_list,
    stuck_ranks,
    waited_ranks,
)


@rule(
    "DDP301",
    Remediation(
        "Suspect the hardware path: rerun with NCCL_P2P_DISABLE=1 (then NCCL_SHM_DISABLE=1, "
        "NCCL_IB_DISABLE=1) to find the faulty transport; run nccl-tests with -c 1; drain the "
        "node if it persists.",
        ("NCCL_P2P_DISABLE=1 ddp-doctor run",),
    ),
)
def allreduce_wrong_result(facts: FactSet) -> Iterator[Hit]:
    """What it finds: after all-reduce of rank-dependent integers (exact in float32 and
    float16), broadcast and all_gather, elements that differ from the exact answer, counted
    per rank and type.
    Why it matters: training silently diverges or produces garbage; nothing crashes.
    Example: a GPU pair with broken P2P over PCIe behind an ACS-enabled switch.
    Fix: bisect transports with NCCL_*_DISABLE, then fix or drain the hardware.
    """
    job = facts.job
    if not job:
        return
    wrong: dict[str, dict[int, int]] = {}
    for rank in job.ranks:
        record = rank.stage("allreduce")
        if not record or not record.ok:
            continue
        data = record.data
        for dtype, result in dict(data.get("allreduce") or {}).items():
            if isinstance(result, dict) and result.get("wrong"):
                wrong.setdefault(f"all_reduce {dtype}", {})[rank.rank] = int(result["wrong"])
        for check in ("broadcast_wrong", "all_gather_wrong"):
            if data.get(check):
                wrong.setdefault(check.removesuffix("_wrong"), {})[rank.rank] = int(data[check])
    for collective, per_rank in wrong.items():
        counts = ", ".join(f"rank {r}: {n}" for r, n in sorted(per_rank.items()))
        yield Hit(
            f"{collective} gave wrong elements ({counts})",
            {"collective": collective, "wrong_per_rank": {str(r): n for r, n in per_rank.items()}},
        )


@rule(
    "DDP302",
    Remediation(
        "Retry with NCCL_P2P_DISABLE=1; if that helps, disable PCIe ACS or boot with "
        "iommu=pt. Check that NCCL_SOCKET_IFNAME names the right interface. In your own "
        "training, a hang is most often ranks running different code: run `ddp-doctor check` "
        "on the script and read the flight recorder's dumps with `ddp-doctor logs DIR`.",
        ("NCCL_P2P_DISABLE=1 ddp-doctor run",),
    ),
)
def collective_hang(facts: FactSet) -> Iterator[Hit]:
    """What it finds: ranks stuck inside a collective stage (all-reduce, broadcast, the DDP
    step) until the job's bound, or failing it with a timeout while a peer never came.
    Why it matters: real training hangs the same way, at the first all-reduce, with no
    error until NCCL's watchdog fires (10-30 minutes).
    Example: P2P over a PCIe switch with ACS on; a rank blocked in data loading.
    Fix: P2P off to bisect, ACS/IOMMU settings, the right interface.
    """
    job = facts.job
    if not job:
        return
    stuck = [s for s in stuck_ranks(job) if collective_stage(s.stage)]
    for stage in dict.fromkeys(s.stage for s in stuck):
        silent = [s.rank for s in stuck if s.stage == stage]
        waited = [r.rank for r in waited_ranks(job, stage)]
        waited_note = f"; ranks {rank_list(waited)} timed out waiting" if waited else ""
        bound = "the job's time limit" if job.timed_out else "the group timeout"
        yield Hit(
            f"stage {stage!r} did not complete on rank(s) {rank_list(silent)} within {bound}"
            f"{waited_note}",
            {
                "stage": stage,
                "stuck_ranks": silent,
                "waiting_ranks": waited,
                "job_timed_out": job.timed_out,
            },
        )


describe(
    "DDP304",
    Remediation(
        "Make control flow rank-symmetric: every rank must call the same collectives in the "
        "same order with the same shapes. TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch."
    ),
    """What it finds: "Detected mismatch between collectives on ranks" (TORCH_DISTRIBUTED_DEBUG=
    DETAIL) and gloo's "Received data size doesn't match expected size" in the job's output
    (through the log patterns); in a log, NCCL's own wordings too: NCCL 2.4-2.6's "NCCL WARN
    Mismatched collective detected, please check your collective calls at and around rank N",
    and the report of NCCL >= 2.24's RAS client (ncclras), "MISMATCH" / "Communicator ranks
    have different AllGather operation counts" / "N ranks have launched up to operation M".
    Why it matters: without DETAIL it is a hang until the group timeout, or a SIGABRT.
    Example: `if rank == 0: dist.barrier()`; a batch-size-dependent all_gather.
    Fix: rank-symmetric control flow.
    """,
)


@rule(
    "DDP305",
    Remediation(
        "Give each rank its own GPU: torch.cuda.set_device(local_rank) before "
        "init_process_group, and --nproc-per-node no higher than the number of GPUs."
    ),
)
def duplicate_gpu(facts: FactSet) -> Iterator[Hit]:
    """What it finds: ranks on one host reporting the same GPU (PCI bus id, else device).
    Why it matters: NCCL refuses with "Duplicate GPU detected: rank 1 and rank 0 both on
    CUDA device"; where it does not, memory and speed halve.
    Example: torchrun --nproc-per-node 2 on a 1-GPU machine; a script that never calls
    set_device.
    Fix: set_device(local_rank); no more ranks than GPUs.
    """
    job = facts.job
    if not job:
        return
    seen: dict[tuple[str, str], list[int]] = {}
    for identity in job.identities:
        if identity.device.startswith("cuda"):
            key = (identity.host, identity.pci_bus_id or identity.device)
            seen.setdefault(key, []).append(identity.rank)
    for (host, gpu), ranks in seen.items():
        if len(ranks) > 1:
            yield Hit(
                f"ranks {rank_list(ranks)} share GPU {gpu} on {host}",
                {"ranks": ranks, "gpu": gpu, "host": host},
            )


@rule(
    "DDP306",
    Remediation("Run every rank from one image or environment: same torch, CUDA, NCCL, driver."),
)
def version_skew(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the versions each rank reported at the identity stage (torch and its git
    hash, CUDA runtime, the NCCL loaded, driver, Python), compared; the ranks and hosts on each
    side are named.
    Why it matters: NCCL versions must match across ranks; mixed torch versions disagree on
    collective formats. Failures look random ("unhandled system error", hangs).
    Example: one node updated to a new image, the others not.
    Fix: one image everywhere.
    """
    job = facts.job
    if not job:
        return
    for field in VERSION_FIELDS:
        groups: dict[str, list[Identity]] = {}
        for identity in job.identities:
            value = getattr(identity, field)
            if value:
                groups.setdefault(str(value), []).append(identity)
        if field == "torch_git_version" and _torch_versions_differ(job.identities):
            continue  # the torch version already says it
        if len(groups) > 1:
            sides = "; ".join(f"{value} on {_where(ranks)}" for value, ranks in groups.items())
            yield Hit(f"ranks differ in {field.replace('_', ' ')}: {sides}", _skew(field, groups))


FEW_HOSTS = 32  # up to this many hosts, the evidence names each one's value


def _skew(field: str, groups: dict[str, list[Identity]]) -> dict[str, object]:
    """Each value's hosts and ranks, compact; the value of every rank and host where few."""
    identities = sorted((i for ranks in groups.values() for i in ranks), key=lambda i: i.rank)
    if len({i.host for i in identities}) <= FEW_HOSTS:
        return {
            "field": field,
            "per_rank": {str(i.rank): getattr(i, field) for i in identities},
            "per_host": {i.host: getattr(i, field) for i in identities},
        }
    return {
        "field": field,
        "per_value": {
            value: {"hosts": _hosts(ranks), "on_ranks": rank_list(i.rank for i in ranks)}
            for value, ranks in groups.items()
        },
    }


def _hosts(identities: list[Identity]) -> str:
    from ddp_doctor.facts.runs import host_list

    hosts = list(dict.fromkeys(i.host for i in identities))
    return ", ".join(hosts) if len(hosts) <= 3 else host_list(hosts)


VERSION_FIELDS = (
    "torch_version",
    "torch_git_version",
    "cuda_version",
    "nccl_version",
    "driver_version",
    "python_version",
)


def _torch_versions_differ(identities: tuple[Identity, ...]) -> bool:
    return len({i.torch_version for i in identities if i.torch_version}) > 1


def _where(identities: list[Identity]) -> str:
    hosts = _hosts(identities)
    return f"{hosts} (rank{'s' if len(identities) > 1 else ''} {rank_list(i.rank for i in identities)})"


@rule(
    "DDP307",
    Remediation(
        "Read the first failing rank's own error; its exit code says where to look. 1: a "
        "Python exception (its traceback; wrap the entry point in "
        "torch.distributed.elastic.multiprocessing.errors.record to have torchrun print it). "
        "2: a command-line usage error. -9 (SIGKILL): something killed it; the host's "
        "out-of-memory killer is the usual sender, which dmesg, `sacct -o State` or the "
        "container's OOMKilled state confirm (a SIGKILL alone does not). -6 (SIGABRT): an abort whose reason is printed just above it. "
        "-11 (SIGSEGV): native code crashed (a compiled package built for another torch). "
        "-15 (SIGTERM): stopped from outside, usually after another rank failed.",
        ("dmesg -T | grep -i -E 'killed process|out of memory'",),
    ),
)
def rank_crashed(facts: FactSet) -> Iterator[Hit]:
    """What it finds: ranks that failed with their own error (not a timeout or a lost peer), or
    ended mid-stage with a non-zero exit code or a signal other than torchrun's SIGTERM; the
    stage and the exit code or signal are named.
    Why it matters: the other ranks then fail with "Connection closed by peer" and torchrun
    prints ChildFailedError for all of them; the first failure is the one to read.
    Example: exitcode -9 on rank 3 during data loading, and dmesg shows the kernel's
    "Out of memory: Killed process" for its pid: the host ran out of memory.
    Fix: the rank's own error; for -9, find out who killed it (dmesg, the scheduler).
    """
    job = facts.job
    if not job:
        return
    for rank in job.ranks:
        if not died_by_itself(rank, job):
            continue
        last = rank.last_started
        stage = last.stage if last else "startup"
        how = describe_exit(rank.exit_code) if rank.exit_code is not None else "failed"
        error = last.error if last is not None and last.ended else None
        yield Hit(
            f"rank {rank.rank} {how} at stage {stage!r}" + (f": {error}" if error else ""),
            {"rank": rank.rank, "stage": stage, "exit_code": rank.exit_code, "error": error},
        )
