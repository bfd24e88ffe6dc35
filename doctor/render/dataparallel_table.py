"""The DataParallel probe's part of a report: each visible GPU, whether it took part, its
memory against GPU 0's, what NVML saw, and where the output landed."""

from __future__ import annotations

from typing import Any

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.job import DataParallelFacts
from ddp_doctor.render.columns import plain_table
from ddp_doctor.rules.participation import GpuPart, gpu_parts

MIB = 1024**2
HEADERS = (
    "gpu",
    "pci bus id",
    "torch",
    "replica",
    "peak (MiB)",
    "vs GPU 0",
    "NVML rise (MiB)",
    "busy max",
    "took part",
)
NUMBERS = (0, 4, 5, 6, 7)  # the NVML index, the memory figures and the busiest sample


def render_dataparallel_text(dp: DataParallelFacts | dict[str, Any]) -> str:
    if isinstance(dp, dict):
        try:
            dp = from_jsonable(DataParallelFacts, dp)
        except CodecError:
            return "DataParallel: facts unreadable"
    parts = gpu_parts(dp)
    if any(part.took_part is not None for part in parts):
        working = sum(1 for part in parts if part.took_part)
        took_part = f"{working} of {len(parts)} GPUs took part"
    else:
        took_part = "which GPUs took part is unknown (no NVML samples, no record of forwards)"
    steps = f", batch {dp.batch} in {dp.steps} steps" if dp.batch and dp.steps else ""
    lines = [
        f"DataParallel: {took_part}{steps}; output on {dp.output_on} "
        f"(output_device cuda:{dp.output_device})"
    ]
    if dp.sampling_error:
        lines.append(f"NVML samples: none ({dp.sampling_error})")
    first = dp.peak_allocated_bytes[0] if dp.peak_allocated_bytes else 0
    rows = [_row(part, first) for part in parts]
    table = plain_table(rows, HEADERS, right=NUMBERS)
    return "\n".join(lines) + "\n" + table


def _row(part: GpuPart, first_peak: int) -> list[str]:
    gpu = part.nvml
    peak = part.peak_allocated_bytes
    rise = (
        gpu.memory_used_max_bytes - gpu.memory_used_min_bytes
        if gpu and gpu.memory_used_max_bytes is not None and gpu.memory_used_min_bytes is not None
        else None
    )
    busy = gpu.utilization_gpu_max_percent if gpu else None
    return [
        str(gpu.nvml_index) if gpu else "-",
        gpu.pci_bus_id if gpu else "-",
        f"cuda:{part.device_id}" if part.device_id is not None else "-",
        _yes_no(part.ran_replica) if part.in_device_ids else "-",
        f"{peak / MIB:.0f}" if peak is not None else "-",
        f"{100 * peak / first_peak:.0f}%" if peak is not None and first_peak else "-",
        f"{rise / MIB:.0f}" if rise is not None else "-",
        f"{busy}%" if busy is not None else "-",
        _yes_no(part.took_part, no="NO"),
    ]


def _yes_no(value: bool | None, no: str = "no") -> str:
    return "?" if value is None else "yes" if value else no
