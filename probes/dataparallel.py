"""The DataParallel probe: one process, a small model over every GPU torch sees.

The child (`python -m ddp_doctor.probes.dataparallel`, printing one JSON object) steps
nn.DataParallel for about a second and records where the model, each replica's forward and the
output ran, and each card's peak memory, as nn.DataParallel users see them. Meanwhile this
process samples every visible GPU through NVML (gpu_sampling.py), so the report can say which
GPUs worked; the child itself needs no NVML.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType
from typing import Any

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts import GpuFacts
from ddp_doctor.jobfacts import DataParallelFacts, DataParallelGpu

from .base import ProbeFailed, ProbeSkipped, ProbeTimedOut
from .gpu_sampling import NvmlSampler, SamplingUnavailable
from .runner import run_command

BATCH = 256
FEATURES, HIDDEN = 1024, 4096
STEP_SECONDS = 1.0  # NVML's utilisation window is 1/6 s to 1 s: each GPU must work that long
MIN_STEPS, MAX_STEPS = 2, 2000
DEVICE_MISMATCH = "must have its parameters and buffers on device"  # DDP405 judges that one


def collect_dataparallel(
    gpus: int,
    timeout_s: float = 60.0,
    sample: Sequence[GpuFacts] = (),
    nvml: ModuleType | None = None,
    command: Sequence[str] | None = None,
) -> DataParallelFacts:
    """`sample`: the visible GPUs as NVML lists them; `command` replaces the child's argv."""
    if gpus == 0:
        raise ProbeSkipped("no GPU visible: nn.DataParallel needs CUDA devices")
    argv = list(command or [sys.executable, "-m", "ddp_doctor.probes.dataparallel"])
    sampler, sampling_error = _sampler(sample, nvml)
    if sampler is not None:
        try:
            sampler.start()
        except SamplingUnavailable as error:  # the probe still runs, unsampled
            sampler, sampling_error = None, str(error)
    try:
        result = run_command(argv, timeout_s)
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


# --- the child ----------------------------------------------------------------------------


def measure(batch: int = BATCH, seconds: float = STEP_SECONDS) -> dict[str, Any]:
    """Steps DataParallel over every GPU torch sees, for `seconds`, and says what happened."""
    import torch

    from .identity import pci_bus_id

    if not torch.cuda.is_available():
        return {
            "device_ids": [],
            "output_device": -1,
            "model_device": "cpu",
            "output_on": "cpu",
            "peak_allocated_bytes": [],
            "error": "torch.cuda.is_available() is False",
        }
    device_ids = list(range(torch.cuda.device_count()))
    first = torch.device("cuda", device_ids[0])
    forward_devices: list[int] = []
    model = torch.nn.Sequential(
        _forward_recorder(torch, forward_devices),
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, FEATURES),
    ).to(first)
    wrapped = torch.nn.DataParallel(model, device_ids=device_ids, output_device=device_ids[0])
    for index in device_ids:
        torch.cuda.reset_peak_memory_stats(index)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    inputs = torch.randn(batch, FEATURES, device=first)
    error, output_on, steps = None, "none", 0
    started = time.perf_counter()
    try:
        while steps < MIN_STEPS or (time.perf_counter() - started < seconds and steps < MAX_STEPS):
            output = wrapped(inputs)
            output.float().pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
        output_on = str(output.device)
    except RuntimeError as failure:
        error = f"{type(failure).__name__}: {failure}"[:500]
    if error is None:  # after a CUDA error, synchronising would only raise it again
        for index in device_ids:
            torch.cuda.synchronize(index)
    return {
        "device_ids": device_ids,
        "output_device": device_ids[0],
        "model_device": str(next(model.parameters()).device),
        "output_on": output_on,
        "peak_allocated_bytes": [torch.cuda.max_memory_allocated(i) for i in device_ids],
        "error": error,
        "batch": batch,
        "steps": steps,
        "forward_devices": sorted(set(forward_devices)),
        "device_bus_ids": [pci_bus_id(torch.cuda.get_device_properties(i)) for i in device_ids],
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "batch_bytes": 2 * inputs.numel() * inputs.element_size(),  # input, gathered output
    }


def _forward_recorder(torch: Any, devices: list[int]) -> Any:
    """A layer that notes the device of every forward. DataParallel's replicas are shallow
    copies, so all of them append to the same list."""

    class ForwardRecorder(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            devices.append(x.device.index)
            return x

    return ForwardRecorder()


if __name__ == "__main__":
    print(json.dumps(measure()))
