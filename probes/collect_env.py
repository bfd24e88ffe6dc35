"""The probe for what `python -m torch.utils.collect_env` reports beyond the other probes:
toolchain, OS and libc, the Python build, the CPU, the packages around torch; run in the
patient's Python (patient/collect_env.py), never importing torch, in about 0.1 s."""

from __future__ import annotations

import json

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.machine import CollectEnvFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeTimedOut
from ddp_doctor.probes.interpreter import CouldNotStart, Runner, run_in_patient
from ddp_doctor.probes.runner import run_command

TIMEOUT_S = 20.0


def collect_collect_env(
    python: str, timeout_s: float = TIMEOUT_S, runner: Runner = run_command
) -> CollectEnvFacts:
    try:
        result = run_in_patient(python, "collect_env", timeout_s, runner)
    except CouldNotStart as error:
        raise ProbeFailed(str(error)) from None
    if result.timed_out:
        raise ProbeTimedOut(f"{python} did not answer within {timeout_s:g} s")
    try:
        return from_jsonable(CollectEnvFacts, json.loads(result.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, CodecError, TypeError):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        why = lines[-1].strip() if lines else f"exit code {result.returncode}"
        raise ProbeFailed(f"collect_env facts not read in {python}: {why}") from None
