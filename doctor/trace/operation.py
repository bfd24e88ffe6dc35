"""The `trace` operation: which Python runs the user's command, whether it can, and the traced
run itself within the time limit. The command prints; this decides."""

from __future__ import annotations

import os
import shlex
import shutil
import time
from dataclasses import replace

from ddp_doctor.engine import PendingProbes, Probe, run_probe, run_probes
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
AFTER_RUN = ("torch", "collect_env")
AFTER_RUN_MIN_S = 3.0  # below this, torch's import would not fit in what --timeout leaves
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
        from ddp_doctor.trace.static import rank_guard_checks

        facts = run_trace(config, progress.say, progress.line)
        if facts.forensics is not None:
            progress.say("trace: checking the lines the ranks stopped at")
        checks = rank_guard_checks(facts)
        return replace(facts, command=shlex.join(words), rank_guard_checks=checks)

    results.append(run_probe(Probe("trace", traced, config.timeout_s + TRACE_GRACE_S)))
    # after the run, not beside it: an import of torch next to the ranks' own slows their
    # start on a small machine, and a short --hang-after would then take it for a hang
    results += after_the_run(python, budget, timeout, progress)
    progress.done()
    return _in_order([*results, *machine.wait()])


def after_the_run(
    python: str, budget: Budget, timeout: float, progress: Progress
) -> list[ProbeResult]:
    """torch's build and the toolchain, within what the run left of --timeout; a run that
    used it all gets them skipped, with why (the bound is the user's, not the probes')."""
    left = budget.deadline - time.monotonic()
    if left < AFTER_RUN_MIN_S:
        why = f"the run used the time limit (--timeout {timeout:g}); `run --no-jobs` reports it"
        return [ProbeResult(name, ProbeStatus.SKIPPED, None, 0.0, why) for name in AFTER_RUN]
    progress.say("trace: reading torch's build and the toolchain")
    limit = min(DEFAULT_PROBE_TIMEOUT_S, left)
    results = run_probes([torch_probe(python, limit), collect_env_probe(python, limit)])
    if limit >= DEFAULT_PROBE_TIMEOUT_S:
        return results
    why = f"did not fit in the {limit:.1f} s the run left of --timeout {timeout:g}"
    return [_cut_short(result, why) for result in results]


def _cut_short(result: ProbeResult, why: str) -> ProbeResult:
    """A probe cut by what the run left is skipped for that reason, not a slow machine."""
    if result.status is not ProbeStatus.TIMED_OUT:
        return result
    return replace(result, status=ProbeStatus.SKIPPED, error=why)


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
    """torch's build (CUDA, NCCL, devices) as `run` reports it: one more import of torch
    (about 1.2 s here), once the run is over."""
    from ddp_doctor.probes.torch_info import collect_torch

    limit = min(TORCH_PROBE_TIMEOUT_S, limit)
    return Probe("torch", lambda: collect_torch(python, timeout_s=limit), limit + 2)


def _in_order(results: list[ProbeResult]) -> list[ProbeResult]:
    return sorted(results, key=lambda r: TRACE_PROBE_ORDER.index(r.probe))


def _int(value: float | int | None) -> int | None:
    return None if value is None else int(value)
