"""The DataParallel probe: one process, a small model over every GPU torch sees.

The child (dataparallel_steps.py, inside the patient's Python, printing one JSON object)
steps nn.DataParallel for about a second and records where the model, each replica's forward
and the output ran, and each card's peak memory, as nn.DataParallel users see them. Meanwhile
this process samples every visible GPU through NVML (gpu_sampling.py), so the report can say which
GPUs worked; the child itself needs no NVML.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.job import DataParallelFacts, DataParallelGpu
from ddp_doctor.facts.machine import GpuFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped, ProbeTimedOut
from ddp_doctor.probes.interpreter import run_in_patient
from ddp_doctor.probes.job.gpu_sampling import NvmlSampler, SamplingUnavailable
from ddp_doctor.probes.runner import run_command

DEVICE_MISMATCH = "must have its parameters and buffers on device"  # DDP405 judges that one


def collect_dataparallel(
    gpus: int,
    timeout_s: float = 60.0,
    sample: Sequence[GpuFacts] = (),
    nvml: ModuleType | None = None,
    command: Sequence[str] | None = None,
    python: str = sys.executable,
) -> DataParallelFacts:
    """`sample`: the visible GPUs as NVML lists them; `command` replaces the child's argv;
    `python`: the patient's interpreter, where the child runs."""
    if gpus == 0:
        raise ProbeSkipped("no GPU visible: nn.DataParallel needs CUDA devices")
    sampler, sampling_error = _sampler(sample, nvml)
    if sampler is not None:
        try:
            sampler.start()
        except SamplingUnavailable as error:  # the probe still runs, unsampled
            sampler, sampling_error = None, str(error)
    try:
        if command:
            result = run_command(list(command), timeout_s)
        else:
            result = run_in_patient(python, "dataparallel_steps", timeout_s, run_command)
    finally:
        if sampler is not None:
            sampler.stop()
    if result.timed_out:
        raise ProbeTimedOut(f"the DataParallel probe took longer than {timeout_s:g} s")
    try:
        facts = from_jsonable(DataParallelFacts, json.loads(result.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, CodecError):
        tail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise ProbeFailed(f"the DataParallel probe failed: {tail[0]}") from None
    sampled = sampler.results() if sampler else ()
    facts = replace(facts, gpus=match_devices(sampled, facts), sampling_error=sampling_error)
    if facts.error and DEVICE_MISMATCH not in facts.error:
        raise ProbeFailed(f"nn.DataParallel failed: {facts.error}", facts)
    return facts


def _sampler(
    sample: Sequence[GpuFacts], nvml: ModuleType | None
) -> tuple[NvmlSampler | None, str | None]:
    if not sample:
        return None, "NVML lists no whole GPU to sample here (none visible, or only MIG slices)"
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "nvidia-ml-py is not installed, so GPUs cannot be sampled"
    return NvmlSampler(nvml, [gpu.index for gpu in sample]), None


def match_devices(
    sampled: Sequence[DataParallelGpu], facts: DataParallelFacts
) -> tuple[DataParallelGpu, ...]:
    """Gives each sampled GPU torch's index for it, by PCI bus id; where torch did not say its
    bus ids, by position (the visible GPUs are listed in CUDA's order)."""
    pairs = zip(facts.device_ids, facts.device_bus_ids, strict=False)
    by_bus = {_bus_key(bus): device for device, bus in pairs if bus}
    matched = []
    for position, gpu in enumerate(sampled):
        if by_bus:
            device = by_bus.get(_bus_key(gpu.pci_bus_id))
        else:
            device = facts.device_ids[position] if position < len(facts.device_ids) else None
        matched.append(replace(gpu, device_id=device))
    return tuple(matched)


def _bus_key(bus_id: str) -> str:
    """NVML writes 00000000:18:00.0; other tools drop or shorten the domain."""
    return bus_id.upper().split(":", 1)[-1]
