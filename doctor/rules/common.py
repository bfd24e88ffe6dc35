"""Small readings of the facts that several rules share."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.readings.visible_devices import VisibleDevices, parse_visible_devices


def visible_devices(facts: FactSet) -> VisibleDevices:
    gpus = facts.nvml.gpus if facts.nvml else ()
    return parse_visible_devices(facts.env.get("CUDA_VISIBLE_DEVICES"), gpus)


def gpu_present(facts: FactSet) -> bool:
    """Any GPU this process could use, by NVML or by torch."""
    torch_count = facts.torch.device_count if facts.torch else 0
    return bool(facts.nvml and facts.nvml.gpus) or torch_count > 0


def visible_capabilities(facts: FactSet) -> Iterator[tuple[int, str, tuple[int, int]]]:
    """(index, name, capability) of each GPU the process sees, from NVML or else torch."""
    if facts.nvml:
        for gpu in visible_devices(facts).gpus:
            if gpu.compute_capability:
                yield gpu.index, gpu.name, gpu.compute_capability
    elif facts.torch:
        for device in facts.torch.devices:
            yield device.index, device.name, device.capability


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def env_count(value: str | None) -> int | None:
    """A launcher variable (WORLD_SIZE, LOCAL_WORLD_SIZE) as a whole number; None if unset or
    malformed (DDP011 reports malformed ones)."""
    return int(value) if value is not None and value.strip().isdigit() else None
