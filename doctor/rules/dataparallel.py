"""DDP401, DDP405, DDP406: the DataParallel probe, judged against what a healthy run does.

The probe is the doctor's own well-behaved DataParallel: the model on device_ids[0] before
wrapping, output_device=device_ids[0], every GPU torch sees in device_ids, a batch far larger
than the GPU count. What these rules find is therefore wrong with the machine or with torch,
not with a training script (`ddp-doctor check` judges scripts).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from ddp_doctor.facts.job import DataParallelFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.participation import IDLE_REASONS, gpu_parts

GIB = 1024**3
IMBALANCE_RATIO = 1.5
IMBALANCE_MIN_BYTES = 256 * 1024**2  # the floor DDP404 uses too


def healthy_first_gpu_extra(dp: DataParallelFacts) -> int:
    """What a healthy step puts on device_ids[0] beyond what each replica holds: the master
    weights' gradients and the buffers that sum the replicas' gradients into them (two copies
    of the parameters), the whole input batch and the gathered output."""
    return 2 * (dp.parameter_bytes or 0) + (dp.batch_bytes or 0)


@rule(
    "DDP401",
    Remediation(
        "Reinstall or upgrade torch and run `ddp-doctor run` again; if GPU 0 still fills up, "
        "report it to PyTorch with this report. For training, DistributedDataParallel with one "
        "process per GPU (torchrun) spreads memory evenly."
    ),
)
def dataparallel_gpu0_imbalance(facts: FactSet) -> Iterator[Hit]:
    """What it finds: in the DataParallel probe, device_ids[0]'s peak memory above 1.5x, and
    at least 256 MiB above, what a healthy run puts there: the median replica plus the master
    weights' gradients, the buffers that reduce the replicas' gradients into them, the input
    batch and the gathered output.
    Why it matters: DataParallel always loads GPU 0 more (it gathers outputs and holds the
    master weights), but this much more, with the doctor's small model, means torch or the
    machine holds memory there that it should not: GPU 0 runs out first in training.
    Example: GPU 0 at 9 GiB while each replica peaks at 3 GiB, with a model of 32 MiB:
    more than DataParallel's design explains.
    Fix: reinstall or upgrade torch; DDP for training.
    """
    dp = facts.dataparallel
    if not dp or dp.error or len(dp.peak_allocated_bytes) < 2:
        return
    first = dp.peak_allocated_bytes[0]
    replicas = [peak for peak in dp.peak_allocated_bytes[1:] if peak > 0]
    if not replicas:
        return
    expected = int(statistics.median(replicas)) + healthy_first_gpu_extra(dp)
    if first > IMBALANCE_RATIO * expected and first - expected >= IMBALANCE_MIN_BYTES:
        yield Hit(
            f"DataParallel: GPU {dp.device_ids[0]} peaked at {first / GIB:.2f} GiB, where a "
            f"healthy run puts {expected / GIB:.2f} GiB ({first / expected:.1f}x)",
            {
                "device_ids": list(dp.device_ids),
                "peak_bytes": list(dp.peak_allocated_bytes),
                "expected_bytes": expected,
            },
        )


@rule(
    "DDP405",
    Remediation(
        "This torch's DataParallel does not put tensors where it is told on this machine: "
        "reinstall or upgrade torch. In training code, move the model to device_ids[0] before "
        "wrapping (model.to(f'cuda:{device_ids[0]}')) and expect outputs on output_device."
    ),
)
def dp_output_device_mismatch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: in the DataParallel probe, which moves its model to device_ids[0] and
    asks for output_device=device_ids[0] itself, the output on another device, the model moved
    off device_ids[0], or the error "module must have its parameters and buffers on device
    cuda:0".
    Why it matters: the doctor placed everything correctly, so torch (or the CUDA device
    numbering under it) misplaces tensors here: training code gets outputs where its loss does
    not expect them, or crashes at the first forward.
    Example: the output on cuda:1 although output_device is 0, or the model found on cuda:1
    after the steps.
    Fix: reinstall or upgrade torch; in scripts, model on device_ids[0] before wrapping.
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


@rule(
    "DDP406",
    Remediation(
        "Make every GPU visible to torch (compare `nvidia-smi -L` with "
        "torch.cuda.device_count(); check CUDA_VISIBLE_DEVICES and the container's GPUs) and "
        "run `ddp-doctor run` again. In training code, leave device_ids unset (or list every "
        "GPU) and keep each batch at least as large as the number of GPUs (DataLoader drop_last=True).",
        ("nvidia-smi -L", "python -c 'import torch; print(torch.cuda.device_count())'"),
    ),
)
def dataparallel_gpu_unused(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a visible GPU that took no part in the DataParallel probe's steps:
    torch does not see it, no replica ran on it, or NVML, sampling every visible GPU about 20
    times a second while the steps ran, saw neither its memory rise nor its utilisation above
    0% (what users check with `nvidia-smi -l 1`).
    Why it matters: DataParallel uses fewer GPUs than the machine offers without a word: the
    job runs slower than it should, and the idle GPUs' memory is wasted.
    Example: 8 GPUs, torch.cuda.device_count() 7; or, in training code, device_ids=[0, 1] on
    a 4-GPU machine, or a last batch of 3 samples on 4 GPUs (scatter makes 3 chunks).
    Fix: make every GPU visible to torch; no device_ids, batches of at least one sample per
    GPU.
    """
    dp = facts.dataparallel
    if not dp or dp.error:
        return
    parts = gpu_parts(dp)
    working = sum(1 for part in parts if part.why_idle is None)
    for part in parts:
        if part.why_idle is not None:
            yield Hit(
                f"{part.label} took no part in DataParallel: {IDLE_REASONS[part.why_idle]} "
                f"({working} of {len(parts)} GPUs worked)",
                {
                    "gpu": part.nvml.nvml_index if part.nvml else None,
                    "pci_bus_id": part.nvml.pci_bus_id if part.nvml else None,
                    "device_id": part.device_id,
                    "reason": part.why_idle,
                    "gpus_working": working,
                    "gpus_visible": len(parts),
                },
            )
