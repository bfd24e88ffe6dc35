"""DDP401-DDP405: how DDP and DataParallel wrap the model, and where memory lands."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from ddp_doctor.facts import FactSet
from ddp_doctor.jobfacts import JobFacts
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule

GIB = 1024**3
IMBALANCE_RATIO = 1.5
IMBALANCE_MIN_BYTES = 256 * 1024**2


@rule(
    "DDP401",
    Remediation(
        "Use DistributedDataParallel with one process per GPU (torchrun): each GPU then holds "
        "only its own activations and gradients."
    ),
)
def dataparallel_gpu0_imbalance(facts: FactSet) -> Iterator[Hit]:
    """What it finds: in the DataParallel probe, device_ids[0]'s peak memory above 1.5x the
    mean of the other GPUs.
    Why it matters: the first GPU gathers outputs and holds the optimizer state: it runs out
    of memory while the others sit half empty, and the whole job runs at its pace.
    Example: 8 GPUs with nn.DataParallel: GPU 0 at 78 GB, the rest at 30 GB.
    Fix: DDP.
    """
    dp = facts.dataparallel
    if not dp or len(dp.peak_allocated_bytes) < 2:
        return
    first, others = dp.peak_allocated_bytes[0], dp.peak_allocated_bytes[1:]
    mean_others = sum(others) / len(others)
    if mean_others and first > IMBALANCE_RATIO * mean_others:
        yield Hit(
            f"DataParallel: GPU {dp.device_ids[0]} peaked at {first / GIB:.2f} GiB, the others "
            f"at {mean_others / GIB:.2f} GiB on average ({first / mean_others:.1f}x)",
            {"peak_bytes": list(dp.peak_allocated_bytes), "device_ids": list(dp.device_ids)},
        )


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
        "Call torch.cuda.set_device(local_rank) first thing in each rank, create tensors with an "
        "explicit device, and load checkpoints with map_location."
    ),
)
def stray_context_on_gpu0(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NVML's process list during the job: a rank's pid holding memory on a GPU
    that is not its own (usually GPU 0).
    Why it matters: each stray CUDA context costs 300-500 MB on GPU 0, which then runs out of
    memory first; in exclusive mode the job fails.
    Example: torch.load(...) without map_location, or torch.cuda.current_device() before
    set_device, in every rank.
    Fix: set_device first, map_location.
    """
    job = facts.job
    if not job:
        return
    own_gpu = {i.pid: i.pci_bus_id for i in job.identities if i.pci_bus_id}
    rank_of = {i.pid: i.rank for i in job.identities}
    for row in _gpu_processes(job):
        pid, bus = row.get("pid"), str(row.get("pci_bus_id", ""))
        if pid in own_gpu and not _same_bus(bus, own_gpu[pid]):
            yield Hit(
                f"rank {rank_of[pid]} (pid {pid}) holds memory on GPU {row.get('gpu')} ({bus}), "
                "not only on its own GPU",
                {
                    "rank": rank_of[pid],
                    "pid": pid,
                    "gpu": row.get("gpu"),
                    "used_bytes": row.get("used_bytes"),
                },
            )


def _gpu_processes(job: JobFacts) -> list[dict]:
    rank0 = job.rank(0)
    record = rank0.stage("memory") if rank0 else None
    rows = record.data.get("gpu_processes") if record and record.ok else None
    return [row for row in rows or [] if isinstance(row, dict) and "pid" in row]


def _same_bus(a: str, b: str) -> bool:
    """NVML writes 00000000:18:00.0, torch-derived ids may differ in case and domain width."""

    def tail(bus_id: str) -> str:
        return bus_id.upper().split(":", 1)[-1]

    return tail(a) == tail(b)


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


@rule(
    "DDP405",
    Remediation(
        "Move the model to device_ids[0] before wrapping (model.to(f'cuda:{device_ids[0]}')) and "
        "pass output_device consistently; the caller must expect outputs there."
    ),
)
def dp_output_device_mismatch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: in the DataParallel probe, the output on another device than
    output_device, the model off device_ids[0], or the error "module must have its
    parameters and buffers on device cuda:0".
    Why it matters: a crash at the first forward, or outputs gathered where the loss does not
    expect them (cross-device copies every step).
    Example: DataParallel(model.to('cuda:1'), device_ids=[0, 1]).
    Fix: model on device_ids[0], a consistent output_device.
    """
    dp = facts.dataparallel
    if not dp or not dp.device_ids:
        return
    expected_output = f"cuda:{dp.output_device}"
    expected_model = f"cuda:{dp.device_ids[0]}"
    if dp.error:  # any other failure is the probe's (DDP904), not a device mismatch
        if "must have its parameters and buffers on device" in dp.error:
            yield Hit(f"DataParallel failed: {dp.error}", {"error": dp.error})
    elif dp.output_on != expected_output or dp.model_device != expected_model:
        yield Hit(
            f"DataParallel output on {dp.output_on} (expected {expected_output}), model on "
            f"{dp.model_device} (expected {expected_model})",
            {
                "output_on": dp.output_on,
                "model_device": dp.model_device,
                "output_device": expected_output,
            },
        )
