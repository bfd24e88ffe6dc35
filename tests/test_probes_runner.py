"""The one way probes start programs: bounded, and the whole process group killed on expiry."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from ddp_doctor.probes.runner import descendants, kill_group, run_command


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


def test_descendants_and_kill_group_reach_a_grandchild_in_its_own_session() -> None:
    """As torchrun's ranks: a grandchild in a session of its own outlives a group kill."""
    script = (
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'],"
        " start_new_session=True);"
        "print('started', flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "started\n"
        (grandchild,) = descendants(child.pid)
        assert psutil.Process(grandchild).ppid() == child.pid
        kill_group(child)
        child.wait(timeout=10)
        deadline = time.monotonic() + 10  # SIGKILL lands soon, not at once
        while not _is_gone(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _is_gone(grandchild)
    finally:
        child.kill()
        child.wait(timeout=10)


def _is_gone(pid: int) -> bool:
    """Dead: no such process, or a zombie its new parent has not reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_process_that_is_gone_has_no_descendants() -> None:
    assert descendants(2**22 + 12345) == []  # above Linux's pid_max
