"""DDP402-DDP404: the DDP job's gradients, and where its memory lands (DataParallel, DDP401
and DDP405: dataparallel.py)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.common import plural
from ddp_doctor.rules.contexts import stray_contexts

GIB = 1024**3
IMBALANCE_RATIO = 1.5
IMBALANCE_MIN_BYTES = 256 * 1024**2


@rule(
    "DDP402",
    Remediation(
        "Wrap the model once with DistributedDataParallel after moving it to the rank's device, "
        "run backward through the wrapped model, and use the default process group."
    ),
)
def ddp_gradients_not_synced(facts: FactSet) -> Iterator[Hit]:
    """What it finds: checksums of parameters and gradients after three DDP steps that differ
    between ranks (MIN and MAX over ranks disagree).
    Why it matters: the replicas drift apart; each rank trains its own model.
    Example: a broken all-reduce transport; a model whose forward bypasses the DDP wrapper.
    Fix: correct wrapping and a working process group.
    """
    job = facts.job
    if not job:
        return
    for rank in job.ranks:
        record = rank.stage("ddp")
        if record and record.ok and record.data.get("in_sync") is False:
            yield Hit(
                f"rank {rank.rank}: parameters or gradients differ across ranks after DDP steps "
                f"(spread {record.data.get('param_spread')}, {record.data.get('grad_spread')})",
                {
                    "rank": rank.rank,
                    "param_spread": record.data.get("param_spread"),
                    "grad_spread": record.data.get("grad_spread"),
                },
            )
            return


@rule(
    "DDP403",
    Remediation(
        "The doctor's job calls torch.cuda.set_device(local_rank) before anything else, so "
        "torch, NCCL or the driver opened the extra context: upgrade torch (older releases "
        "guessed the device from the rank in dist.barrier()) and check that CUDA_VISIBLE_DEVICES "
        "is the same for every rank. In training code, also call set_device first and load "
        "checkpoints with map_location."
    ),
)
def stray_context_on_gpu0(facts: FactSet) -> Iterator[Hit]:
    """What it finds: while every rank of the job still holds its memory, a GPU with more CUDA
    contexts of the job's processes than ranks run on it, the extra ones held by processes that
    hold a context on their own GPU too (usually every rank also on GPU 0). Counted per GPU
    from NVML's process lists, so it works inside a container with its own pid namespace,
    where NVML's pids are the host's; processes already on a GPU before the job do not count.
    Why it matters: the doctor's ranks set their device first, so the extra context comes from
    torch, NCCL or the driver and will appear in training too: each costs 300-500 MB on that
    GPU, which runs out of memory first; in exclusive compute mode the job fails.
    Example: pytorch/pytorch#15051: dist.barrier() on NCCL assumed device = rank and opened a
    context on another GPU.
    Fix: upgrade torch; the same CUDA_VISIBLE_DEVICES for every rank; in scripts set_device
    first and map_location.
    """
    job = facts.job
    if not job:
        return
    for stray in stray_contexts(job, facts.nvml):
        ranks = ", ".join(str(rank) for rank in stray.ranks) or "unknown"
        yield Hit(
            f"GPU {stray.gpu} ({stray.pci_bus_id}) holds {stray.contexts} CUDA contexts of the "
            f"job but runs {plural(len(stray.ranks_on_gpu), 'rank')}: rank(s) {ranks} of other "
            f"GPUs hold {stray.used_bytes / 1024**2:.0f} MiB there",
            {
                "gpu": stray.gpu,
                "pci_bus_id": stray.pci_bus_id,
                "contexts": stray.contexts,
                "ranks_on_gpu": list(stray.ranks_on_gpu),
                "ranks": list(stray.ranks),
                "extra_contexts": stray.extra,
                "used_bytes": stray.used_bytes,
                "pids_are_ranks": stray.pids_are_ranks,
            },
        )


@rule(
    "DDP404",
    Remediation(
        "Look for work only one rank does (evaluation, logging tensors, checkpoint loading on "
        "rank 0) and for tensors created on the wrong device."
    ),
)
def per_rank_memory_imbalance(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a rank whose peak allocated memory over the job's stages is above 1.5x
    the median of the other ranks and at least 256 MiB more.
    Why it matters: that rank runs out of memory first; the job runs at the pace of the
    fullest GPU.
    Example: rank 0 evaluating on the whole validation set while the others wait.
    Fix: spread or move the extra work.
    """
    job = facts.job
    if not job or len(job.ranks) < 2:
        return
    peaks = {
        r.rank: max((int(s.data.get("peak_allocated_bytes", 0) or 0) for s in r.stages), default=0)
        for r in job.ranks
    }
    if not any(peaks.values()):
        return
    for rank, peak in peaks.items():
        others = statistics.median(p for r, p in peaks.items() if r != rank)
        if peak > IMBALANCE_RATIO * others and peak - others >= IMBALANCE_MIN_BYTES:
            yield Hit(
                f"rank {rank} peaked at {peak / GIB:.2f} GiB, the other ranks at "
                f"{others / GIB:.2f} GiB (median)",
                {"rank": rank, "peak_bytes": peak, "others_median_bytes": others},
            )
