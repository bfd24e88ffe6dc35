"""The doctor under hostile input and faults, piece by piece (tests/test_fault_matrix.py runs
the whole faults end to end): opening only regular files, bounded config reads, the outcome
codes DDP905 and DDP906, strict JSON, exit codes, and what survives the doctor's death."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor import exitcodes, strict_json
from ddp_doctor.facts.job import JobFacts, Preflight, RankFacts, StageRecord
from ddp_doctor.inputs import NotRegularFile, TooLarge, open_regular, read_capped
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.job import payload
from ddp_doctor.probes.job.launch import JobConfig, preflight, run_job
from ddp_doctor.report_io import report_from_json

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"


# --- opening only regular files ---------------------------------------------------------------


@pytest.mark.timeout(20)  # a blocking open() of a FIFO would hang here
def test_only_regular_files_are_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "socket"))
        cases = {fifo: "FIFO", tmp_path / "socket": "socket", tmp_path: "folder"}
        cases[Path("/dev/null")] = "character device"
        for path, kind in cases.items():
            with pytest.raises(NotRegularFile, match=kind):
                open_regular(path)
    (tmp_path / "file").write_bytes(b"abc")
    with open_regular(tmp_path / "file") as stream:
        assert stream.read() == b"abc"


def test_read_capped_refuses_what_is_over_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"x" * 101)
    assert read_capped(path, 101) == b"x" * 101
    with pytest.raises(TooLarge) as refused:
        read_capped(path, 100)
    assert (refused.value.size, refused.value.limit) == (101, 100)


@pytest.mark.timeout(20)
def test_check_never_reads_config_files_that_are_not_regular(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pyproject.toml")
    os.mkfifo(tmp_path / ".gitignore")
    (tmp_path / "train.py").write_text("import torch\n")
    done = _doctor("check", "--format", "json", str(tmp_path))
    assert done.returncode == 0 and json.loads(done.stdout)["findings"] == []


def test_an_oversized_pyproject_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("# padding\n" * 120_000)  # 1.2 MB
    (tmp_path / "train.py").write_text("import torch\n")
    done = _doctor("check", str(tmp_path / "train.py"))
    assert done.returncode == 2 and "over the 1 MiB limit" in done.stderr


def _doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddp_doctor", *args], capture_output=True, text=True, timeout=60
    )


# --- the doctor's own failure to launch (DDP905) ----------------------------------------------


def _healthy() -> dict[str, ProbeResult]:
    report = report_from_json(json.loads(HEALTHY.read_text()))
    return {result.probe: result for result in report.probes}


def _codes(results: dict[str, ProbeResult]) -> list[str]:
    return [finding.code for finding in judge(list(results.values()))]


def test_a_launcher_that_cannot_be_spawned_is_ddp905_and_exit_2(tmp_path: Path) -> None:
    config = JobConfig(nproc=2, python=str(tmp_path / "vanished" / "python"), timeout_s=10)
    job = run_job(config, preflight(config))
    assert not job.launched and "cannot start" in (job.launch_error or "")
    results = _healthy()
    results["job"] = replace(results["job"], facts=job)
    findings = judge(list(results.values()))
    assert [f.code for f in findings if f.code.startswith("DDP9")] == ["DDP905"]
    from ddp_doctor.cli import ReportOptions
    from ddp_doctor.model import make_report
    from ddp_doctor.registry import Selector

    options = ReportOptions("json", None, "error", Selector(), False, False)
    assert options.exit_code(make_report(list(results.values()), findings)) == exitcodes.USAGE


def test_no_workspace_is_ddp905() -> None:
    results = {
        "workspace": ProbeResult(
            "workspace", ProbeStatus.FAILED, None, 0.0, "no usable temporary folder"
        )
    }
    assert _codes(results) == ["DDP905"]  # and not DDP904 as well


# --- a run cut by --timeout (DDP906) against a real hang (DDP202, DDP302) ---------------------


def _timed_out(*ranks: RankFacts, duration: float = 9.0) -> dict[str, ProbeResult]:
    results = _healthy()
    job = replace(
        results["job"].facts,
        timed_out=True,
        exit_code=None,
        duration_s=duration,
        timeout_s=9.0,
        init_timeout_s=5.0,
        ranks=ranks,
        identities=(),
        bandwidth=(),
    )
    results["job"] = replace(results["job"], facts=job)
    return results


def _in(stage: str, running: float | None) -> tuple[StageRecord, ...]:
    done = tuple(StageRecord(s, ended=True, ok=True, seconds=0.1) for s in ("init", "identity"))
    earlier = done[: ("init", "identity", "allreduce").index(stage)]
    return (*earlier, StageRecord(stage, running_s=running))


def test_ranks_within_their_own_limits_are_cut_by_the_timeout_not_hung() -> None:
    found = _codes(_timed_out(RankFacts(0, _in("init", 3.0)), RankFacts(1)))
    assert "DDP906" in found
    assert not {"DDP202", "DDP302", "DDP308"} & set(found)


def test_ranks_past_their_own_limits_are_hung() -> None:
    assert "DDP202" in _codes(_timed_out(RankFacts(0, _in("init", 40.0)), RankFacts(1)))
    found = _codes(
        _timed_out(RankFacts(0, _in("allreduce", 30.0)), RankFacts(1, _in("allreduce", 30.0)))
    )
    assert "DDP302" in found and "DDP906" not in found


def test_ranks_that_never_started_within_the_job_time_are_cut_short() -> None:
    assert "DDP906" in _codes(_timed_out(RankFacts(0), RankFacts(1), duration=4.0))
    # a launcher silent for longer than any start takes is not slow, it is stuck
    assert "DDP906" not in _codes(_timed_out(RankFacts(0), RankFacts(1), duration=60.0))


def test_a_report_without_stage_times_keeps_the_hang_verdict() -> None:
    assert "DDP202" in _codes(_timed_out(RankFacts(0, _in("init", None)), RankFacts(1)))


# --- numbers and JSON -------------------------------------------------------------------------


def test_strict_json_has_no_nan_or_infinity() -> None:
    value = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": (1, "x")}
    text = strict_json.dumps(value)
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None,
        "b": [None, None, 1.5],
        "c": [1, "x"],
    }


def test_a_report_keeps_only_what_run_keeps_of_the_job_output() -> None:
    document = json.loads(HEALTHY.read_text())
    job = next(p for p in document["probes"] if p["probe"] == "job")["facts"]
    job["output_tail"] = "a" * 200_000 + "THE END"
    facts = next(r for r in report_from_json(document).probes if r.probe == "job").facts
    assert len(facts.output_tail) == 64 * 1024 and facts.output_tail.endswith("THE END")


# --- exit codes -------------------------------------------------------------------------------


def test_the_readme_documents_each_stop_signal_as_its_exit_code() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| (1[2-4]\d) \| stopped by (SIG[A-Z]+)", readme, re.MULTILINE))
    assert {name: int(code) for code, name in rows.items()} == {
        signal.Signals(signum).name: exitcodes.stopped_by(signum)
        for signum in exitcodes.STOP_SIGNALS
    }


def test_usage_errors_are_one_line_in_process_too() -> None:
    from click.testing import CliRunner

    from ddp_doctor.cli import cli

    for args in (["run", "--nproc", "0"], ["nope"], ["run", "--timeout", "inf"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- what outlives the doctor -----------------------------------------------------------------


@pytest.mark.slow
def test_the_watchdog_removes_only_the_doctors_folder(tmp_path: Path) -> None:
    ours, other = tmp_path / "ddp-doctor-abc", tmp_path / "elsewhere"
    for folder in (ours, other):
        folder.mkdir()
        (folder / "file").write_text("x")
    for folder, gone in ((ours, True), (other, False)):
        _watch_and_kill_the_doctor(tmp_path, folder)
        assert folder.exists() is not gone


def _watch_and_kill_the_doctor(tmp_path: Path, folder: Path) -> None:
    doctor = subprocess.Popen(["sleep", "60"])
    root = payload.install_payload(tmp_path / "payload")
    env = payload.patient_environment(dict(os.environ), root)
    env[payload.WATCH_VARIABLE] = payload.watch_token(doctor.pid)
    env[payload.FOLDER_VARIABLE] = str(folder)
    program = f"from {payload.PACKAGE}.watchdog import watch_doctor\nimport time\n"
    program += "assert watch_doctor()\nprint('watching', flush=True)\ntime.sleep(60)\n"
    patient = subprocess.Popen(
        [sys.executable, "-c", program], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert patient.stdout is not None and patient.stdout.readline().strip() == "watching"
        doctor.kill()
        doctor.wait()
        assert patient.wait(timeout=10) == -signal.SIGKILL
    finally:
        for process in (doctor, patient):
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_the_doctor_even_by_sigkill() -> None:
    program = (
        "import subprocess, time\n"
        "from ddp_doctor.probes.runner import die_with_parent\n"
        "child = subprocess.Popen(['sleep', '60'], start_new_session=True,"
        " preexec_fn=die_with_parent())\n"
        "print(child.pid, flush=True)\ntime.sleep(60)\n"
    )
    doctor = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert doctor.stdout is not None
    child = int(doctor.stdout.readline())
    doctor.kill()
    doctor.wait()
    deadline = time.monotonic() + 5
    while _alive(child):
        assert time.monotonic() < deadline, "the child outlived the doctor"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_preflight_without_route_launches_nothing() -> None:
    checks = Preflight("10.0.0.1", "10.0.0.1", route_error="ENETUNREACH: Network is unreachable")
    job = run_job(JobConfig(nproc=2), checks)
    assert isinstance(job, JobFacts) and not job.launched
    assert "no route" in (job.not_launched_reason or "")


def _no_process(argv, timeout_s, **_):  # type: ignore[no-untyped-def]
    import errno

    from ddp_doctor.probes.runner import CommandResult

    error = OSError(errno.EAGAIN, "Resource temporarily unavailable")
    return CommandResult(tuple(argv), 127, "", str(error), 0.0, error)


@pytest.mark.parametrize("cause", ["no folder", "no process"])
def test_a_python_probe_the_doctor_cannot_start_is_ddp905(
    cause: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tempfile

    from ddp_doctor.probes.base import ProbeFailed
    from ddp_doctor.probes.interpreter import collect_python

    if cause == "no folder":
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    with pytest.raises(ProbeFailed) as failed:
        collect_python(sys.executable, "--python", runner=_no_process)
    assert failed.value.facts is None  # no facts: nothing known of the patient, no DDP012
    result = ProbeResult("python", ProbeStatus.FAILED, None, 0.0, failed.value.reason)
    assert _codes({"python": result}) == ["DDP905"]


@pytest.mark.parametrize("depth", [100_000, 900])
def test_a_report_nested_too_deeply_is_a_usage_error(tmp_path: Path, depth: int) -> None:
    """Deeper than the JSON parser goes, or deep enough to exhaust the renderers later."""
    document = json.loads(HEALTHY.read_text())
    nested: dict = {}
    inner = nested
    for _ in range(min(depth, 950)):
        inner["a"] = {}
        inner = inner["a"]
    document["probes"][0]["facts"]["variables"] = nested
    text = "[" * depth + "]" * depth if depth > 950 else json.dumps(document)
    (tmp_path / "report.json").write_text(text)
    done = _doctor("diagnose", str(tmp_path / "report.json"))
    assert done.returncode == 2 and "nested" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(30)
def test_output_to_a_fifo_reaches_its_reader(tmp_path: Path) -> None:
    """Checking -o early must not end the reader's input before the report comes."""
    import threading

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    reader = threading.Thread(target=read)
    reader.start()
    done = _doctor("diagnose", str(HEALTHY), "--format", "json", "-o", str(fifo))
    reader.join(10)
    assert done.returncode == 0
    assert json.loads(received[0])["schema_version"] == 1
