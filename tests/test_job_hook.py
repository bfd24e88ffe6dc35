"""The test suite's fault hook (tests/job_hook): it reaches the job's worker only through the
PYTHONPATH the job inherits, and wraps the worker's stages by name; the package has no hook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FAULT_HOOK, job_fault

from ddp_doctor.probes.job import payload

PROGRAM = """
import ddp_doctor_patient.worker as worker
stage = worker.Worker.allreduce
print("STAGE", stage.__name__)
me = worker.Worker.__new__(worker.Worker)
me.rank = 1
try:
    stage(me)
except Exception as error:  # without a fault the real stage runs, on nothing
    print("RAISED", error)
"""


def _run_in_payload(tmp_path: Path) -> str:
    root = payload.install_payload(tmp_path / "payload")
    env = payload.patient_environment(dict(os.environ), root, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_fault_wraps_the_named_stage_of_the_named_rank(tmp_path: Path) -> None:
    with job_fault("1:allreduce:crash"):
        assert str(FAULT_HOOK) in os.environ["PYTHONPATH"].split(os.pathsep)
        out = _run_in_payload(tmp_path)
    assert "STAGE stage_with_fault" in out
    assert "RAISED ddp-doctor test fault: rank 1 crashes at allreduce" in out
    assert str(FAULT_HOOK) not in os.environ.get("PYTHONPATH", "")


def test_without_a_fault_the_worker_is_untouched(tmp_path: Path) -> None:
    with job_fault(None):
        out = _run_in_payload(tmp_path)
    assert "STAGE allreduce" in out


@pytest.mark.parametrize("spec", ["1:allreduce:explode", "1:training:crash", "0:ddp:corrupt"])
def test_a_misspelt_fault_fails_in_the_test_not_in_a_rank(spec: str) -> None:
    with pytest.raises(ValueError), job_fault(spec):
        pass
