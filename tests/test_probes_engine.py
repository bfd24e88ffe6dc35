"""The engine runs every probe guarded and bounded: one probe's trouble never sinks the run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ddp_doctor.engine import Probe, run_probe, run_probes
from ddp_doctor.facts.machine import EnvFacts, TorchFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeStatus
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so the abandoned probe thread ends instead of lingering."""
    event = threading.Event()
    yield event
    event.set()


def raising() -> object:
    return {}["gpus"]


def skipped() -> object:
    raise ProbeSkipped("the NVIDIA driver is loaded but sees no GPU")


def failed() -> object:
    raise ProbeFailed("torch does not import", TorchFacts(importable=False, import_error="x"))


def test_a_raising_probe_is_crashed_and_the_others_report(release: threading.Event) -> None:
    results = run_probes(
        [
            Probe("env", lambda: EnvFacts({"NCCL_DEBUG": "INFO"}), 5.0),
            Probe("nvml", raising, 5.0),
            Probe("host", skipped, 5.0),
            Probe("torch", failed, 5.0),
        ]
    )
    assert [(r.probe, r.status) for r in results] == [
        ("env", ProbeStatus.OK),
        ("nvml", ProbeStatus.CRASHED),
        ("host", ProbeStatus.SKIPPED),
        ("torch", ProbeStatus.FAILED),
    ]
    crashed = results[1]
    assert crashed.facts is None and crashed.error and "KeyError" in crashed.error
    assert results[0].facts == EnvFacts({"NCCL_DEBUG": "INFO"})
    assert results[2].error and results[2].facts is None
    assert results[3].facts == TorchFacts(importable=False, import_error="x")


def test_a_hanging_probe_times_out_quickly(release: threading.Event) -> None:
    started = time.monotonic()
    results = run_probes(
        [
            Probe("nvml", lambda: release.wait(30), 0.3),
            Probe("env", lambda: EnvFacts(), 5.0),
        ]
    )
    elapsed = time.monotonic() - started
    assert elapsed < 2.0
    assert [(r.probe, r.status) for r in results] == [
        ("nvml", ProbeStatus.TIMED_OUT),
        ("env", ProbeStatus.OK),
    ]
    timed_out = results[0]
    assert timed_out.facts is None and timed_out.error
    assert 0.3 <= timed_out.duration_s < 2.0


def test_probes_run_concurrently(release: threading.Event) -> None:
    gate = threading.Barrier(3, timeout=2.0)
    results = run_probes([Probe(f"p{i}", lambda: gate.wait() is not None, 5.0) for i in range(3)])
    assert all(r.status is ProbeStatus.OK for r in results)


def test_durations_are_measured() -> None:
    result = run_probe(Probe("host", lambda: time.sleep(0.05) or EnvFacts(), 5.0))
    assert result.status is ProbeStatus.OK and result.duration_s >= 0.05


def test_crash_and_timeout_become_findings(release: threading.Event) -> None:
    results = run_probes(
        [
            Probe("nvml", raising, 5.0),
            Probe("host", lambda: release.wait(30), 0.2),
            Probe("env", lambda: EnvFacts(), 5.0),
        ]
    )
    findings = judge(results)
    by_code = {f.code: f for f in findings if f.code in ("DDP901", "DDP902")}
    assert by_code["DDP901"].evidence["probe"] == "nvml"
    assert by_code["DDP902"].evidence["probe"] == "host"
