"""What `trace` leaves behind (issue 19): a SIGKILL of the doctor still removes its temporary
folder (the ranks' watchdog, as for `run`), and a rank's `setsid` grandchild, re-parented on
the way, ends with the traced run (the doctor is its subreaper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_cases_trust import sigkill_trace_mid_run

DAEMONISING = """
import subprocess, sys
marker = sys.argv[1]
code = f"import time; time.sleep(300)  # {marker}"
# a child that starts a session of its own and exits at once: the sleeper is re-parented
subprocess.run([sys.executable, "-c",
    "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
    "start_new_session=True)", code], check=True)
"""


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_of_trace_leaves_no_folder(tmp_path: Path) -> None:
    _, script = sigkill_trace_mid_run(tmp_path)  # asserts the folder is gone
    assert wait_for(lambda: not processes_mentioning(str(script)), 10)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_setsid_grandchild_ends_with_the_traced_run(tmp_path: Path) -> None:
    script = tmp_path / "daemonising.py"
    script.write_text(DAEMONISING)
    marker = f"ddp-doctor-test-{os.getpid()}-{time.monotonic_ns()}"
    done = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "trace", "--timeout", "60", "--",
         sys.executable, str(script), marker],
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    leftovers = processes_mentioning(marker)
    for pid in leftovers:  # the test's own cleanup, should the doctor have failed
        os.kill(pid, signal.SIGKILL)
    assert not leftovers
