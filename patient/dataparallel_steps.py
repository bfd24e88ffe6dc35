"""Inside the patient: nn.DataParallel over every GPU torch sees, for about a second.

Run as `python -m ddp_doctor_patient.dataparallel_steps`: prints one JSON object recording where
the model, each replica's forward and the output ran, and each card's peak memory, as
DataParallel users see them. The doctor samples the GPUs through NVML meanwhile
(dataparallel.py), so this side needs no NVML.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .identity import pci_bus_id
from .watchdog import watch_doctor

BATCH = 256
FEATURES, HIDDEN = 1024, 4096
STEP_SECONDS = 1.0  # NVML's utilisation window is 1/6 s to 1 s: each GPU must work that long
MIN_STEPS, MAX_STEPS = 2, 2000


def measure(batch: int = BATCH, seconds: float = STEP_SECONDS) -> dict[str, Any]:
    """Steps DataParallel over every GPU torch sees, for `seconds`, and says what happened."""
    import torch

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
    watch_doctor()
    print(json.dumps(measure()))
