"""Exit codes that tell the truth (issue 19): a job that did not succeed always leaves an error,
whatever warnings stand beside it; a patient Python that hangs is DDP012; a trace stopped at its
limit is DDP908, never "No problems found"; every numeric option is finite and bounded."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_doctor import cli
from ddp_doctor.facts.trace import Forensics, RankSnapshot, TraceFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"


def failed_job_report(tmp_path: Path, shm_bytes: int | None, tail: str = "") -> Path:
    report = json.loads(HEALTHY.read_text())
    for probe in report["probes"]:
        if probe["probe"] == "job":
            probe["facts"]["exit_code"] = 1
            probe["facts"]["output_tail"] += tail or "\nsegfault in a place nobody knows\n"
        if probe["probe"] == "host" and shm_bytes is not None:
            probe["facts"]["shm_total_bytes"] = shm_bytes
            probe["facts"]["container"] = "docker"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def diagnose(path: Path, *args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli.cli, ["diagnose", "--format", "json", *args, str(path)])
    return result.exit_code, [f["code"] for f in json.loads(result.stdout)["findings"]]


def test_a_failed_job_beside_a_small_dev_shm_is_an_error(tmp_path: Path) -> None:
    """The landed main exited 0 here: DDP008 (a warning) counted as explaining the failure."""
    exit_code, codes = diagnose(failed_job_report(tmp_path, shm_bytes=64 << 20))
    assert "DDP008" in codes and "DDP308" in codes
    assert exit_code == 1


def test_a_failed_job_beside_an_nccl_warning_is_an_error(tmp_path: Path) -> None:
    tail = "\nnode:1:1 [0] NCCL WARN something odd happened\n"
    exit_code, codes = diagnose(failed_job_report(tmp_path, None, tail))
    assert "DDP503" in codes and "DDP308" in codes and exit_code == 1


def test_a_more_specific_error_still_replaces_ddp308(tmp_path: Path) -> None:
    tail = "\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    exit_code, codes = diagnose(failed_job_report(tmp_path, 64 << 20, tail))
    assert "DDP505" in codes and "DDP308" not in codes and exit_code == 1


def test_a_patient_python_that_hangs_is_ddp012() -> None:
    hung = ProbeResult("python", ProbeStatus.TIMED_OUT, None, 20.0, "no answer within 20 s")
    codes = [f.code for f in judge([hung])]
    assert codes == ["DDP012"]  # an error, not only DDP902's warning


def traced(outcome: str, exit_code: int | None, snapshots: tuple[RankSnapshot, ...] = ()):
    forensics = Forensics("timeout", 19.0, 0.5, snapshots) if snapshots else None
    facts = TraceFacts(
        command="torchrun --nproc-per-node 2 train.py",
        launcher="torchrun",
        outcome=outcome,
        exit_code=exit_code,
        timeout_s=20.0,
        duration_s=20.0,
        forensics=forensics,
    )
    return [ProbeResult("trace", ProbeStatus.OK, facts, 20.0)]


def test_a_trace_stopped_at_its_limit_with_ranks_computing_is_ddp908() -> None:
    snapshots = (RankSnapshot(0, True), RankSnapshot(1, True, exited=True))
    findings = judge(traced("timeout", None, snapshots))
    assert [f.code for f in findings] == ["DDP908"]
    assert findings[0].evidence["outcome"] == "timeout"


def test_a_trace_that_exits_non_zero_unexplained_is_ddp908_and_success_is_silent() -> None:
    assert [f.code for f in judge(traced("finished", 3))] == ["DDP908"]
    assert judge(traced("finished", 0)) == []


def test_a_trace_that_never_launched_is_not_ddp908() -> None:
    results = traced("timeout", None)
    facts = replace(results[0].facts, launched=False, not_launched_reason="no such script")
    assert "DDP908" not in [f.code for f in judge([replace(results[0], facts=facts)])]


@pytest.mark.parametrize(
    "args",
    [
        ["--timeout", "nan"],
        ["--timeout", "1e18"],
        ["--timeout", "inf"],
        ["--hang-after", "nan"],
        ["--steps", "9" * 5000],
        ["--epochs", "0"],
    ],
)
def test_trace_numbers_are_finite_and_bounded(args: list[str]) -> None:
    result = CliRunner().invoke(cli.cli, ["trace", *args, "--", "python", "x.py"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


SMALL_SHM_RUN = """
import sys
sys.path.insert(0, {tests!r})
from fakes import job_fault
from ddp_doctor.cli import main
with job_fault("1:allreduce:exit"):
    main(["run", "--format", "json", "--sizes", "1K:64K:8", "--iters", "2", "--timeout", "60"])
"""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_failed_job_in_a_64_mib_dev_shm_exits_1_beside_ddp008(tmp_path: Path) -> None:
    """As in a default docker container: /dev/shm a 64 MiB tmpfs (a mount namespace of its
    own), and a rank that fails. The job's error stands beside DDP008, and the exit is 1."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare for a mount namespace")
    program = tmp_path / "small_shm_run.py"
    program.write_text(SMALL_SHM_RUN.format(tests=str(ROOT / "tests")))
    script = f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {program}"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=200
    )
    codes = [f["code"] for f in json.loads(done.stdout)["findings"]]
    assert "DDP008" in codes, done.stderr[-2000:]
    errors = [f for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"]
    assert errors, codes  # DDP308, or the more specific DDP307 for the rank that exited
    assert done.returncode == 1
