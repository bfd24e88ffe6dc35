"""The `trace` operation: which Python runs the user's command, whether it can, and the traced
run itself within the time limit. The command prints; this decides."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import replace

from ddp_doctor.engine import PendingProbes, Probe, run_probe
from ddp_doctor.facts.trace import TraceFacts
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.progress import Progress
from ddp_doctor.run.checkup import (
    DEFAULT_PROBE_TIMEOUT_S,
    TORCH_PROBE_TIMEOUT_S,
    Budget,
    collect_env_probe,
    why_patient_unusable,
)
from ddp_doctor.trace.command import TracedCommand, interpreter_of

DEFAULT_HANG_AFTER_S = 60.0
TRACE_PROBE_ORDER = ("env", "host", "python", "nvml", "torch", "trace", "collect_env")
TRACE_GRACE_S = 15.0  # the trace bounds itself; this only catches a doctor that hangs


def default_hang_after(timeout_s: float) -> float:
    """60 s, or a third of the time limit when that is less, so a hang is named in time."""
    return min(DEFAULT_HANG_AFTER_S, max(1.0, timeout_s / 3))


def patient_python(command: TracedCommand, explicit: str | None) -> tuple[str, str]:
    """--python, else the Python the command names (python, or torchrun's own), else as `run`
    chooses (the active environment, this Python with torch, python3 on PATH)."""
    from ddp_doctor.probes.interpreter import choose_python

    if explicit:
        return choose_python(explicit, os.environ)
    named = interpreter_of(command)
    if named:
        return named, f"the {command.launcher} in the command"
    python, why = choose_python(None, os.environ)
    if command.launcher == "torchrun" and command.interpreter is None:
        found = shutil.which("torchrun")
        missing = f"torchrun at {found} names no Python" if found else "torchrun is not on PATH"
        why = f"{missing}; {why}"
    return python, why


def collect_trace(
    command: TracedCommand,
    words: tuple[str, ...],
    explicit_python: str | None,
    limits: dict[str, float | int | None],
    progress: Progress,
) -> list[ProbeResult]:
    from ddp_doctor.probes.interpreter import collect_python
    from ddp_doctor.probes.trace.launch import TraceConfig, run_trace

    timeout = float(limits["timeout_s"] or 0)
    budget = Budget(timeout)
    python, chosen_by = patient_python(command, explicit_python)
    quick = min(DEFAULT_PROBE_TIMEOUT_S, timeout)
    machine = PendingProbes(machine_probes(quick))  # milliseconds, while the rest goes on
    progress.say("trace: checking the Python that trains")
    described = run_probe(Probe("python", lambda: collect_python(python, chosen_by, quick), quick))
    results = [described]
    unusable = why_patient_unusable(described.facts, python)
    if unusable is not None:
        reason, torch_missing = unusable
        if torch_missing:
            from ddp_doctor.facts.machine import TorchFacts

            torch = TorchFacts(importable=False, import_error=reason)
            results.append(ProbeResult("torch", ProbeStatus.FAILED, torch, 0.0, reason))
        results.append(ProbeResult("trace", ProbeStatus.SKIPPED, None, 0.0, reason))
        progress.done()
        return _in_order([*results, *machine.wait()])
    hang_after = limits.get("hang_after_s") or default_hang_after(timeout)
    config = TraceConfig(
        command=command,
        python=python,
        timeout_s=budget.left(),
        hang_after_s=float(hang_after),
        steps=_int(limits.get("steps")),
        epochs=_int(limits.get("epochs")),
    )

    def traced() -> TraceFacts:
        return replace(run_trace(config, progress.say, progress.line), command=shlex.join(words))

    torch = PendingProbes([torch_probe(python, quick), collect_env_probe(python, quick)])
    results.append(run_probe(Probe("trace", traced, config.timeout_s + TRACE_GRACE_S)))
    progress.done()
    return _in_order([*results, *machine.wait(), *torch.wait()])


def machine_probes(limit: float) -> list[Probe]:
    """What `run` reports of the machine (variables, host, GPUs and driver), so a trace
    report pasted into an issue is complete by itself; each takes milliseconds."""
    from ddp_doctor.probes.environment import collect_environment
    from ddp_doctor.probes.host import collect_host
    from ddp_doctor.probes.nvml import collect_nvml

    return [
        Probe("env", collect_environment, limit),
        Probe("host", collect_host, limit),
        Probe("nvml", collect_nvml, limit),
    ]


def torch_probe(python: str, limit: float) -> Probe:
    """torch's build (CUDA, NCCL, devices) as `run` reports it: one more import of torch,
    beside the run's own ranks."""
    from ddp_doctor.probes.torch_info import collect_torch

    limit = min(TORCH_PROBE_TIMEOUT_S, max(limit, 5.0))
    return Probe("torch", lambda: collect_torch(python, timeout_s=limit), limit + 2)


def _in_order(results: list[ProbeResult]) -> list[ProbeResult]:
    return sorted(results, key=lambda r: TRACE_PROBE_ORDER.index(r.probe))


def _int(value: float | int | None) -> int | None:
    return None if value is None else int(value)
