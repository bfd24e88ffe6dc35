"""The one way probes start programs: bounded, and the whole process group killed on expiry."""

from __future__ import annotations

import sys
import time

import pytest

from ddp_doctor.probes.runner import run_command


def test_output_and_exit_code() -> None:
    result = run_command([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], 10)
    assert (result.returncode, result.stdout, result.timed_out) == (3, "out\n", False)


@pytest.mark.slow
def test_timeout_kills_the_child_and_its_children() -> None:
    script = (
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']);"
        "print('started', flush=True); time.sleep(30)"
    )
    started = time.monotonic()
    result = run_command([sys.executable, "-c", script], timeout_s=1.0)
    assert result.timed_out and result.returncode is None
    assert time.monotonic() - started < 5.0  # the grandchild did not hold the pipes open


def test_missing_program_is_an_answer_not_an_exception() -> None:
    result = run_command(["/nonexistent/ddp-doctor-test-binary"], timeout_s=5)
    assert result.returncode == 127 and result.stderr
