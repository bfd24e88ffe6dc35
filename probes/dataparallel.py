"""The DataParallel probe: one process, a small model over the visible GPUs.

dataparallel_steps.py runs inside the patient's Python and prints one JSON object; this side
reads it into DataParallelFacts.
"""

from __future__ import annotations

import json
import sys

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.jobfacts import DataParallelFacts

from .base import ProbeFailed, ProbeSkipped, ProbeTimedOut
from .patient import run_in_patient

DEVICE_MISMATCH = "must have its parameters and buffers on device"  # DDP405 judges that one


def collect_dataparallel(
    gpus: int, timeout_s: float = 60.0, python: str = sys.executable
) -> DataParallelFacts:
    if gpus == 0:
        raise ProbeSkipped("no GPU visible: nn.DataParallel needs CUDA devices")
    result = run_in_patient(python, "dataparallel_steps", timeout_s)
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
