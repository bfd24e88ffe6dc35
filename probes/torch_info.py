"""Torch facts, gathered in a child process of the patient's Python (torch_describe.py runs
there), so that a broken torch cannot take the doctor down."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.machine import TorchFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeTimedOut
from ddp_doctor.probes.interpreter import run_in_patient
from ddp_doctor.probes.runner import CommandResult, run_command

Runner = Callable[..., CommandResult]


def collect_torch(
    python: str = sys.executable, timeout_s: float = 30.0, runner: Runner = run_command
) -> TorchFacts:
    result = run_in_patient(python, "torch_describe", timeout_s, runner)
    if result.timed_out:  # slow is not broken: DDP902 says so, not DDP001
        raise ProbeTimedOut(f"importing torch took longer than {timeout_s:g} s")
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
        facts = from_jsonable(TorchFacts, data)
    except (IndexError, ValueError, CodecError):
        error = _last_error_line(result.stderr) or f"exit code {result.returncode}"
        raise ProbeFailed(
            f"torch could not be inspected: {error}",
            TorchFacts(importable=False, import_error=error),
        ) from None
    if not facts.importable:
        raise ProbeFailed(f"torch does not import: {facts.import_error}", facts)
    return facts


def _last_error_line(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else None
