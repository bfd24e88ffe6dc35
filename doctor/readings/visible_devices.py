"""CUDA_VISIBLE_DEVICES read the way the CUDA driver reads it, checked against NVML's GPUs.

CUDA takes entries left to right and stops at the first one it cannot use: `0,abc,1` shows
GPU 0 only. A repeated entry makes the whole list invalid. `GPU-` entries may be unique
prefixes of a UUID. The list is all indices or all UUIDs, decided by its first entry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ddp_doctor.facts.machine import GpuFacts

LEADING_NUMBER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class VisibleDevices:
    raw: str | None
    gpus: tuple[GpuFacts, ...]  # the NVML GPUs CUDA will use, in CUDA's order
    mig_slices: tuple[str, ...] = ()  # MIG UUIDs named in the variable
    problems: tuple[str, ...] = ()  # why an entry is not used
    hides_all: bool = False  # set on purpose to "" or "-1": no GPU for this process

    @property
    def count(self) -> int:
        return len(self.mig_slices) or len(self.gpus)


def parse_visible_devices(raw: str | None, gpus: Sequence[GpuFacts]) -> VisibleDevices:
    """`gpus` may be empty when NVML could not list them: then only the syntax is checked."""
    if raw is None:
        return VisibleDevices(None, tuple(gpus))
    entries = [entry.strip() for entry in raw.split(",")]
    if raw.strip() in ("", "-1"):
        return VisibleDevices(raw, (), hides_all=True)
    if entries[0].startswith("MIG-"):
        return _parse_mig(raw, entries, gpus)
    if entries[-1] == "" and len(entries) > 1:
        entries.pop()  # a trailing comma: CUDA stops there with nothing left to drop
    chosen: list[GpuFacts] = []
    keys: list[str] = []
    by_uuid = entries[0].startswith("GPU-")
    for position, entry in enumerate(entries):
        key, gpu, problem = _match(entry, by_uuid, gpus)
        if key in keys:
            return VisibleDevices(
                raw, (), problems=(f"{entry!r} is listed twice, which hides every GPU",)
            )
        if problem:
            problems = (problem + _dropped_note(entries[position + 1 :]),)
            return VisibleDevices(raw, tuple(chosen), problems=problems)
        keys.append(key)
        if gpu is not None:
            chosen.append(gpu)
    return VisibleDevices(raw, tuple(chosen))


def _dropped_note(dropped: list[str]) -> str:
    if not dropped:
        return ""
    verb = "is" if len(dropped) == 1 else "are"
    return f"; CUDA stops there, so {', '.join(dropped)} {verb} ignored too"


def _match(
    entry: str, by_uuid: bool, gpus: Sequence[GpuFacts]
) -> tuple[str, GpuFacts | None, str | None]:
    """(what identifies the entry, the GPU it selects, why CUDA stops at it)."""
    if by_uuid:
        if not entry.startswith("GPU-"):
            return entry, None, f"{entry!r} is not a GPU UUID, and the list started with UUIDs"
        matches = [gpu for gpu in gpus if gpu.uuid.startswith(entry)]
        if gpus and len(matches) != 1:
            state = "matches no GPU" if not matches else "matches more than one GPU"
            return entry, None, f"UUID {entry!r} {state}"
        return (matches[0].uuid if matches else entry), (matches[0] if matches else None), None
    # CUDA reads each entry like strtoul: leading digits count ("1x" is 1); none, or a
    # negative number, ends the list.
    digits = LEADING_NUMBER.match(entry)
    if digits is None or int(digits.group()) < 0:
        return entry, None, f"{entry!r} is not a GPU index"
    index = int(digits.group())
    if gpus and index >= len(gpus):
        count = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        return str(index), None, f"index {index} does not exist (NVML sees {count})"
    return str(index), (gpus[index] if gpus else None), None


def _parse_mig(raw: str, entries: list[str], gpus: Sequence[GpuFacts]) -> VisibleDevices:
    known = {uuid for gpu in gpus for uuid in gpu.mig_devices}
    slices: list[str] = []
    for entry in entries:
        if not entry.startswith("MIG-") or (known and entry not in known):
            return VisibleDevices(raw, (), tuple(slices), (f"{entry!r} is not a known MIG device",))
        slices.append(entry)
    return VisibleDevices(raw, (), tuple(slices))
