"""Which GPUs took part in the DataParallel probe, and how much each held against the first:
the reading that DDP401, DDP406 and the report's DataParallel table share."""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.facts.job import DataParallelFacts, DataParallelGpu

MIB = 1024**2
# One replica of the probe's model is 32 MiB of parameters, and its CUDA context more: a GPU
# whose NVML memory never rose by half of that held no replica.
ACTIVE_MEMORY_RISE_BYTES = 16 * MIB

# Why a GPU took no part, by key (evidence) and in words (messages).
IDLE_REASONS = {
    "not-seen-by-torch": "torch does not see it, so DataParallel cannot use it",
    "not-in-device-ids": "it is not in DataParallel's device_ids",
    "no-replica": "DataParallel ran no replica on it",
    "no-activity": "NVML saw neither its memory rise nor its utilisation above 0%",
}


@dataclass(frozen=True)
class GpuPart:
    """One GPU's part in the probe: NVML's samples (if any) and torch's view (if it sees it)."""

    nvml: DataParallelGpu | None
    device_id: int | None
    in_device_ids: bool
    peak_allocated_bytes: int | None
    ran_replica: bool | None  # None: the probe did not record where forwards ran

    @property
    def label(self) -> str:
        if self.nvml is not None:
            return f"GPU {self.nvml.nvml_index} ({self.nvml.pci_bus_id})"
        return f"cuda:{self.device_id}"

    @property
    def nvml_active(self) -> bool | None:
        """Memory rose or the GPU was busy; None when NVML took no usable sample."""
        gpu = self.nvml
        if gpu is None or gpu.samples == 0:
            return None
        rise = None
        if gpu.memory_used_min_bytes is not None and gpu.memory_used_max_bytes is not None:
            rise = gpu.memory_used_max_bytes - gpu.memory_used_min_bytes
        busy = gpu.utilization_gpu_max_percent
        if rise is None and busy is None:
            return None
        return (rise or 0) >= ACTIVE_MEMORY_RISE_BYTES or (busy or 0) > 0

    @property
    def why_idle(self) -> str | None:
        """Why this GPU took no part (a key of IDLE_REASONS); None when it did, or when nothing
        says either way."""
        if self.nvml is not None and self.device_id is None:
            return "not-seen-by-torch"
        if not self.in_device_ids:
            return "not-in-device-ids"
        if self.ran_replica is False:
            return "no-replica"
        if self.nvml_active is False:
            return "no-activity"
        return None

    @property
    def took_part(self) -> bool | None:
        if self.why_idle is not None:
            return False
        return True if self.ran_replica or self.nvml_active else None


def gpu_parts(dp: DataParallelFacts) -> list[GpuPart]:
    """Every visible GPU NVML sampled, then any device torch used that NVML did not sample."""
    peaks = dict(zip(dp.device_ids, dp.peak_allocated_bytes, strict=False))
    ran = set(dp.forward_devices) if dp.forward_devices is not None else None

    def part(gpu: DataParallelGpu | None, device: int | None) -> GpuPart:
        in_use = device is not None and device in dp.device_ids
        return GpuPart(
            nvml=gpu,
            device_id=device,
            in_device_ids=in_use,
            peak_allocated_bytes=peaks.get(device) if device is not None else None,
            ran_replica=(device in ran) if ran is not None and in_use else None,
        )

    parts = [part(gpu, gpu.device_id) for gpu in dp.gpus]
    sampled = {gpu.device_id for gpu in dp.gpus}
    parts += [part(None, device) for device in dp.device_ids if device not in sampled]
    return parts
