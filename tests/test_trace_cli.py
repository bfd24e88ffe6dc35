"""`ddp-doctor trace` as a command: usage errors, the bounds, the ways a script is started
(torchrun -m, --no-python, python), the user's sitecustomize, the doctor's own death, and
the issue's acceptance run. Real gloo jobs, each bounded; no process may be left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tracing import ROOT, TRACE_FIXTURES, assert_nothing_left, expected_markers, trace

from ddp_doctor.exitcodes import USAGE

pytestmark = pytest.mark.slow  # real jobs, subprocess runs or wheel builds

TORCHRUN = ["torchrun", "--nproc-per-node", "2"]
SET_EPOCH = TRACE_FIXTURES / "set_epoch_missing.py"


def ddp_doctor(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddp_doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )


# -- usage ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "words",
    [
        ["trace"],
        ["trace", "--", "bash", "run.sh"],
        ["trace", "--", "torchrun", "--nproc-per-node", "2"],
        ["trace", "--", "python", "-c", "import torch"],
        ["trace", "--", "python", "no_such_script.py"],
        ["trace", "--steps", "0", "--", "python", str(SET_EPOCH)],
    ],
)
def test_usage_errors_are_one_line_and_exit_2(invoke, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = invoke(*words)
    assert result.exit_code == USAGE, result.output
    assert "Traceback" not in result.output


def test_a_python_without_torch_launches_nothing(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bare = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120
    )
    result = invoke(
        "trace", "--format", "json", "--python", str(bare / "bin" / "python"), "--",
        "torchrun", "--nproc-per-node", "2", str(SET_EPOCH),
    )  # fmt: skip
    document = json.loads(result.stdout)
    assert {f["code"] for f in document["findings"]} == {"DDP001"}
    status = {p["probe"]: p["status"] for p in document["probes"]}
    assert {"python": "ok", "torch": "failed", "trace": "skipped"}.items() <= status.items()
    assert {"env", "host", "nvml"} <= status.keys()  # the machine's facts, as `run` has them
    assert result.exit_code == 1


# -- bounds -----------------------------------------------------------------------------------
@pytest.mark.timeout(180)
def test_steps_stop_every_rank_cleanly(tmp_path: Path) -> None:
    traced = trace(tmp_path, [*TORCHRUN, str(SET_EPOCH)], "--steps", "3")
    ranks = traced.trace["ranks"]
    assert [(r["end"], r["end_detail"], r["steps"], r["exit_code"]) for r in ranks] == [
        ("bound", "steps 3", 3, 0),
        ("bound", "steps 3", 3, 0),
    ]
    assert traced.trace["outcome"] == "finished" and traced.trace["exit_code"] == 0
    assert "DDP113" in traced.codes  # 3 steps of 2 per epoch reach the second epoch
    assert_nothing_left(tmp_path)


@pytest.mark.timeout(180)
def test_epochs_stop_before_the_next_epoch(tmp_path: Path) -> None:
    traced = trace(tmp_path, [*TORCHRUN, str(SET_EPOCH)], "--epochs", "1")
    ranks = traced.trace["ranks"]
    assert [(r["end"], r["epochs"], r["steps"]) for r in ranks] == [
        ("bound", 1, 2),
        ("bound", 1, 2),
    ]
    assert "DDP113" not in traced.codes  # one epoch cannot show a missing set_epoch
    assert_nothing_left(tmp_path)


# -- how the script is started ----------------------------------------------------------------
def user_sitecustomize(folder: Path) -> Path:
    """A sitecustomize of the user's that leaves a file per process: it must still run."""
    site = folder / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(folder)!r}, 'site-ran-' + str(os.getpid())).write_text('')\n"
    )
    return site


@pytest.mark.timeout(180)
def test_torchrun_module_with_the_users_sitecustomize(tmp_path: Path) -> None:
    package = tmp_path / "code" / "tracedpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(SET_EPOCH.read_text())
    site = user_sitecustomize(tmp_path)
    path = os.pathsep.join([str(tmp_path / "code"), str(site)])
    traced = trace(tmp_path, [*TORCHRUN, "-m", "tracedpkg.train"], env={"PYTHONPATH": path})
    assert traced.at_lines(package / "train.py") == expected_markers(SET_EPOCH)
    assert {r["rank"] for r in traced.trace["ranks"]} == {0, 1}
    ran = {p.name.removeprefix("site-ran-") for p in tmp_path.glob("site-ran-*")}
    assert {str(r["pid"]) for r in traced.trace["ranks"]} <= ran
    assert_nothing_left(tmp_path)


@pytest.mark.timeout(180)
def test_no_python_entry_through_the_sitecustomize_shim(tmp_path: Path) -> None:
    entry = tmp_path / "train.sh"
    entry.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SET_EPOCH}" "$@"\n')
    entry.chmod(0o755)
    site = user_sitecustomize(tmp_path)
    traced = trace(tmp_path, [*TORCHRUN, "--no-python", str(entry)], env={"PYTHONPATH": str(site)})
    assert traced.at_lines(SET_EPOCH) == expected_markers(SET_EPOCH)
    assert traced.trace["entry"] == "no-python" and len(traced.trace["ranks"]) == 2
    ran = {p.name.removeprefix("site-ran-") for p in tmp_path.glob("site-ran-*")}
    assert {str(r["pid"]) for r in traced.trace["ranks"]} <= ran  # chained to the user's
    assert_nothing_left(tmp_path)


@pytest.mark.timeout(180)
def test_one_python_process_with_dataparallel(tmp_path: Path) -> None:
    script = TRACE_FIXTURES / "dataparallel_single.py"
    traced = trace(tmp_path, ["python", str(script)])
    assert traced.at_lines(script) == expected_markers(script)
    (rank,) = traced.trace["ranks"]
    assert (rank["end"], rank["steps"], rank["exit_code"]) == ("returned", 3, 0)
    assert rank["dataparallel"][0]["device_ids"] == []
    assert_nothing_left(tmp_path)


# -- the doctor's own end ---------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_ranks_die_with_a_killed_doctor(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    doctor = subprocess.Popen(
        [sys.executable, "-m", "ddp_doctor", "trace", "--hang-after", "300", "--python",
         sys.executable, "--", *TORCHRUN, str(TRACE_FIXTURES / "hang_under_rank_guard.py")],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("ddp-doctor-trace-*/ranks/rank1.*.progress")):
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.2)
    doctor.send_signal(signal.SIGKILL)
    doctor.wait(timeout=10)
    assert_nothing_left(tmp_path, wait_s=15)


@pytest.mark.timeout(180)
def test_issue_acceptance_hang_named_within_the_bound(tmp_path: Path) -> None:
    """`ddp-doctor trace --timeout 60 -- torchrun --nproc-per-node 2 .../hang_under_rank_guard.py`
    names the collective, rank 1 and the script's line, within the bound, nothing left."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    script = "fixtures/trace/hang_under_rank_guard.py"
    started = time.monotonic()
    done = ddp_doctor("trace", "--timeout", "60", "--", *TORCHRUN, script, env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert elapsed < 60, elapsed
    assert done.returncode == 1, done.stderr
    hang = next(line for line in done.stdout.splitlines() if "DDP302" in line)
    assert "all_reduce" in hang and "rank 1 never reached it" in hang
    assert f"{script}:15" in hang and f"{script}:16" in hang
    assert_nothing_left(tmp_path)


@pytest.mark.timeout(180)
def test_a_run_stopped_at_the_time_limit_is_no_hang_and_no_success(tmp_path: Path) -> None:
    """Stopped by --timeout with every rank computing: not a hang (no DDP302), but not
    "No problems found" either: DDP908 and exit 1 (issue 19: a CI gate must not pass it)."""
    traced = trace(
        tmp_path, [*TORCHRUN, str(TRACE_FIXTURES / "long_training.py")], "--timeout", "20"
    )
    assert traced.trace["outcome"] == "timeout" and traced.seconds < 20 + 5
    assert [f["code"] for f in traced.findings] == ["DDP908"], traced.findings
    assert traced.exit_code == 1
    ranks = traced.trace["ranks"]
    assert [r["end"] for r in ranks] == ["stopped", "stopped"]
    assert all(r["steps"] > 0 for r in ranks), ranks  # how far each rank got
    assert len(traced.trace["forensics"]["ranks"]) == 2
    assert_nothing_left(tmp_path)
