"""The DataParallel probe: one process, a small model over the visible GPUs.

Run as `python -m ddp_doctor.probes.dataparallel`: prints one JSON object. It records where
the model and the output land and each card's peak memory, as nn.DataParallel users see it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.jobfacts import DataParallelFacts

from .base import ProbeFailed, ProbeSkipped, ProbeTimedOut
from .runner import run_command

BATCH = 256
DEVICE_MISMATCH = "must have its parameters and buffers on device"  # DDP405 judges that one


def collect_dataparallel(gpus: int, timeout_s: float = 60.0) -> DataParallelFacts:
    if gpus == 0:
        raise ProbeSkipped("no GPU visible: nn.DataParallel needs CUDA devices")
    result = run_command([sys.executable, "-m", "ddp_doctor.probes.dataparallel"], timeout_s)
    if result.timed_out:
        raise ProbeTimedOut(f"the DataParallel probe took longer than {timeout_s:g} s")
    try:
        facts = from_jsonable(DataParallelFacts, json.loads(result.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, CodecError):
        tail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise ProbeFailed(f"the DataParallel probe failed: {tail[0]}") from None
    if facts.error and DEVICE_MISMATCH not in facts.error:
        raise ProbeFailed(f"nn.DataParallel failed: {facts.error}", facts)
    return facts


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
    print(json.dumps(measure()))
