"""Inside the patient: a small model under nn.DataParallel over the visible GPUs.

Run as `python -m ddp_doctor_patient.dataparallel_steps`: prints one JSON object recording
where the model and the output land and each card's peak memory, as DataParallel users see it.
"""

from __future__ import annotations

import json
from typing import Any

from .watchdog import watch_doctor

BATCH = 256


def measure() -> dict[str, Any]:
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
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    )
    model.to(torch.device("cuda", device_ids[0]))
    wrapped = torch.nn.DataParallel(model, device_ids=device_ids, output_device=device_ids[0])
    for index in device_ids:
        torch.cuda.reset_peak_memory_stats(index)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
    error = None
    output_on = "none"
    try:
        for _ in range(2):
            output = wrapped(torch.randn(BATCH, 1024, device=f"cuda:{device_ids[0]}"))
            output.float().pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        output_on = str(output.device)
    except RuntimeError as failure:
        error = f"{type(failure).__name__}: {failure}"[:500]
    torch.cuda.synchronize()
    return {
        "device_ids": device_ids,
        "output_device": device_ids[0],
        "model_device": str(next(model.parameters()).device),
        "output_on": output_on,
        "peak_allocated_bytes": [torch.cuda.max_memory_allocated(i) for i in device_ids],
        "error": error,
    }


if __name__ == "__main__":
    watch_doctor()
    print(json.dumps(measure()))
