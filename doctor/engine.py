"""Runs probes: guarded, timed, concurrently. Judging their facts is judge.py's."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped, ProbeTimedOut


@dataclass(frozen=True)
class Probe:
    name: str
    collect: Callable[[], Any]
    timeout_s: float = 20.0


class PendingProbes:
    """Probes started in their own threads; `wait()` collects them, each bounded by its timeout."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = list(probes)
        self.slots: list[ProbeResult | None] = [None] * len(self.probes)
        self.threads = []
        for index, probe in enumerate(self.probes):
            thread = threading.Thread(
                target=_run_into,
                args=(probe, self.slots, index),
                name=f"probe-{probe.name}",
                daemon=True,
            )
            thread.start()
            self.threads.append((time.monotonic(), thread))

    def wait(self) -> list[ProbeResult]:
        for index, (started, thread) in enumerate(self.threads):
            probe = self.probes[index]
            thread.join(max(0.0, probe.timeout_s - (time.monotonic() - started)))
            if self.slots[index] is None:  # still running: abandon the daemon thread
                self.slots[index] = ProbeResult(
                    probe.name,
                    ProbeStatus.TIMED_OUT,
                    None,
                    round(time.monotonic() - started, 3),
                    f"no answer within {probe.timeout_s:g} s",
                )
        return [result for result in self.slots if result is not None]


def run_probes(probes: Sequence[Probe]) -> list[ProbeResult]:
    """Runs every probe concurrently; each is bounded by its own timeout."""
    return PendingProbes(probes).wait()


def run_probe(probe: Probe) -> ProbeResult:
    return run_probes([probe])[0]


def _run_into(probe: Probe, slots: list[ProbeResult | None], index: int) -> None:
    slots[index] = _guarded(probe)


def _guarded(probe: Probe) -> ProbeResult:
    started = time.monotonic()

    def result(status: ProbeStatus, facts: Any = None, error: str | None = None) -> ProbeResult:
        return ProbeResult(probe.name, status, facts, round(time.monotonic() - started, 3), error)

    try:
        facts = probe.collect()
        if cut_by_time_limit(facts):  # the facts stay: how far the run got is the evidence
            return result(ProbeStatus.TIMED_OUT, facts, "cut at its time limit")
        return result(ProbeStatus.OK, facts)
    except ProbeSkipped as skipped:
        return result(ProbeStatus.SKIPPED, error=skipped.reason)
    except ProbeFailed as failed:
        return result(ProbeStatus.FAILED, failed.facts, failed.reason)
    except ProbeTimedOut as timed_out:
        return result(ProbeStatus.TIMED_OUT, error=timed_out.reason)
    except Exception as error:
        return result(ProbeStatus.CRASHED, error=describe_crash(error))


def cut_by_time_limit(facts: Any) -> bool:
    """A job or traced run that the doctor stopped at its --timeout: timed-out, not ok, in
    every format (its facts say so; JobFacts.timed_out, TraceFacts.outcome "timeout")."""
    return (
        getattr(facts, "timed_out", False) is True or getattr(facts, "outcome", None) == "timeout"
    )


def describe_crash(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" at {frames[-1].name}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


__all__ = ["PendingProbes", "Probe", "run_probe", "run_probes"]
