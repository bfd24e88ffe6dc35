"""The faults the README lists under "Faults the doctor withstands", one bounded case each.

The README's table is the list: every row's key must have a case here and every case a row,
and each case's exit code must be the one the row documents (a signal's as the shell reports
it, 128 + its number).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import netns
import pytest
from click.testing import CliRunner
from fakes import job_fault
from fault_cases_trust import SLOW_CASES, TRUST_CASES, doctor

from ddp_doctor import cli

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"
FAST = ["--sizes", "1K:64K:8", "--iters", "2"]
Case = Callable[[Path], int]
CASES: dict[str, Case] = {}


def case(*keys: str) -> Callable[[Case], Case]:
    def register(function: Case) -> Case:
        for key in keys:
            CASES[key] = function
        return function

    return register


def documented() -> dict[str, int]:
    """key -> exit code, from the README's fault table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("<!-- faults:start -->") : text.index("<!-- faults:end -->")]
    rows: dict[str, int] = {}
    for line in table.splitlines()[3:]:
        fault, _, exits = (cell.strip() for cell in line.strip("|").split("|"))
        keys = re.findall(r"`([a-z0-9-]+)`", fault.split("`: ")[0] + "`")
        codes = [int(code) for code in re.findall(r"\d+", exits)]
        for index, key in enumerate(keys):
            rows[key] = codes[index] if len(codes) == len(keys) else codes[0]
    return rows


def one_line_error(process: subprocess.CompletedProcess) -> None:
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddp-doctor: error:"), process.stderr
    assert "Traceback" not in process.stdout + process.stderr


def codes_in(stdout: str) -> list[str]:
    return [finding["code"] for finding in json.loads(stdout)["findings"]]


def shell_exit(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


# --- inputs that are not regular files ------------------------------------------------------


@case("check-fifo")
def _check_fifo(tmp_path: Path) -> int:
    os.mkfifo(tmp_path / "x.py")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "folder" / "y.py")
    for target in ("x.py", "folder"):
        done = doctor("check", "--format", "json", target, cwd=tmp_path, timeout=30)
        (finding,) = json.loads(done.stdout)["findings"]
        assert finding["code"] == "DDP911" and "FIFO" in finding["message"]
    return done.returncode


@case("check-device")
def _check_device(tmp_path: Path) -> int:
    (tmp_path / "x.py").symlink_to("/dev/zero")
    done = doctor("check", "--format", "json", "x.py", cwd=tmp_path, timeout=30)
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["code"] == "DDP911" and "character device" in finding["message"]
    return done.returncode


@case("logs-fifo")
def _logs_fifo(tmp_path: Path) -> int:
    os.mkfifo(tmp_path / "train.log")
    done = doctor("logs", str(tmp_path / "train.log"), timeout=30)
    one_line_error(done)
    assert "not a regular file" in done.stderr
    return done.returncode


@case("logs-device")
def _logs_device(tmp_path: Path) -> int:
    done = doctor("logs", "/dev/zero", timeout=30)
    one_line_error(done)
    return done.returncode


@case("diagnose-fifo")
def _diagnose_fifo(tmp_path: Path) -> int:
    os.mkfifo(tmp_path / "report.json")
    done = doctor("diagnose", str(tmp_path / "report.json"), timeout=30)
    one_line_error(done)
    return done.returncode


# --- inputs past the limits -------------------------------------------------------------------


@case("check-one-line")
def _check_one_line(tmp_path: Path) -> int:
    (tmp_path / "train.py").write_text("x=1;" * 2_350_000 + "\n")  # 9.4 MB
    started = time.monotonic()
    done = doctor("check", "--format", "json", "train.py", cwd=tmp_path, timeout=30)
    assert time.monotonic() - started < 15
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["code"] == "DDP911" and "tokens" in finding["message"]
    return done.returncode


@case("logs-endless")
def _logs_endless(tmp_path: Path) -> int:
    reader, writer = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "ddp_doctor", "logs", "-", "--format", "json"],
        stdin=reader,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(reader)
    threading.Thread(target=_write_forever, args=(writer,), daemon=True).start()
    stdout, _ = process.communicate(timeout=80)
    assert codes_in(stdout.decode()) == ["DDP907"]
    return process.returncode


def _write_forever(descriptor: int) -> None:
    block = b"[rank0]: step 1234 loss 0.12345 lr 1e-4 throughput 123.4 samples/s\n" * 16384
    try:
        while True:
            os.write(descriptor, block)
    except OSError:  # EPIPE: the doctor stopped reading at its limit
        pass
    finally:
        os.close(descriptor)


@case("diagnose-huge-output")
def _diagnose_huge_output(tmp_path: Path) -> int:
    report = json.loads(HEALTHY.read_text())
    job = next(p for p in report["probes"] if p["probe"] == "job")["facts"]
    job["exit_code"] = 1
    job["output_tail"] = (
        "[rank0]: RuntimeError: Expected to have finished reduction in the prior iteration\n"
        + "[rank0]: step 1 loss 0.5\n" * 120_000
        + "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    (tmp_path / "report.json").write_text(json.dumps(report))
    done = doctor("diagnose", "--format", "json", str(tmp_path / "report.json"), timeout=30)
    found = codes_in(done.stdout)
    assert "DDP505" in found  # in the last 64 KiB
    assert "DDP501" not in found  # 3 MB before the end: not what `run` would have kept
    return done.returncode


@case("diagnose-nan")
def _diagnose_nan(tmp_path: Path) -> int:
    text = HEALTHY.read_text()
    report = json.loads(text)
    job = next(p for p in report["probes"] if p["probe"] == "job")
    job["duration_s"] = math.inf
    job["facts"]["bandwidth"][0]["busbw_gbps"] = math.nan
    (tmp_path / "report.json").write_text(json.dumps(report))  # Python writes NaN, Infinity
    done = doctor("diagnose", "--format", "json", str(tmp_path / "report.json"), timeout=30)
    strict = json.loads(done.stdout, parse_constant=_refuse)
    job = next(p for p in strict["probes"] if p["probe"] == "job")
    assert job["duration_s"] is None and job["facts"]["bandwidth"][0]["busbw_gbps"] is None
    return done.returncode


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


# --- signals ----------------------------------------------------------------------------------


def _signal(signum: int, tmp_path: Path) -> int:
    doctor_process = _doctor_with_running_ranks(tmp_path)
    doctor_process.send_signal(signum)
    _, stderr = doctor_process.communicate(timeout=20)
    assert "Traceback" not in stderr
    if signum != signal.SIGKILL:
        last = stderr.strip().splitlines()[-1]
        assert last.startswith(f"ddp-doctor: stopped by {signal.Signals(signum).name}"), stderr
    _assert_nothing_left(tmp_path, within_s=5.0)  # the watchdog looks twice a second
    return shell_exit(doctor_process.returncode)


for _name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGKILL"):
    CASES[_name.lower()] = functools.partial(_signal, getattr(signal, _name))


def _doctor_with_running_ranks(tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "ddp_doctor", "run", "--format", "json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 40
    while len(list(tmp_path.glob("*/ddp-doctor-job-*/ranks/*.jsonl"))) < 2:
        assert time.monotonic() < deadline and process.poll() is None, "the ranks never started"
        time.sleep(0.05)
    return process


def _assert_nothing_left(tmp_path: Path, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while list(tmp_path.iterdir()) or list(processes_mentioning(str(tmp_path))):
        assert time.monotonic() < deadline, (
            list(tmp_path.rglob("*"))[:5],
            list(processes_mentioning(str(tmp_path))),
        )
        time.sleep(0.1)


def processes_mentioning(marker: str) -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        yield int(entry.name)
            except OSError:
                continue


# --- outcomes ---------------------------------------------------------------------------------


@case("no-tmp")
def _no_tmp(tmp_path: Path) -> int:
    program = (
        "import sys, tempfile\n"
        f"tempfile.tempdir = {str(tmp_path / 'gone' / 'tmp')!r}\n"
        "from ddp_doctor.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "run", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert codes_in(done.stdout) == ["DDP905"]
    return done.returncode


@case("timeout-too-short")
def _timeout_too_short(tmp_path: Path) -> int:
    """Rank 1 stalls before init; the run's 4 s end the job while rank 0 still waits within
    its 5 s rendezvous timeout: the timeout cut it, no rank "never joined"."""
    with job_fault("1:init:stall"):
        result = CliRunner().invoke(cli.cli, ["run", "--format", "json", "--timeout", "4", *FAST])
    findings = json.loads(result.stdout)["findings"]
    (cut,) = [f for f in findings if f["code"] == "DDP906"]
    assert cut["evidence"]["stages"] == ["init"]
    assert cut["evidence"]["suggested_timeout_s"] >= 8
    assert "--timeout" in cut["message"]
    assert not [f for f in findings if f["code"] in ("DDP202", "DDP308")]
    return result.exit_code


@case("bad-numbers")
def _bad_numbers(tmp_path: Path) -> int:
    for args in (
        ["--timeout", "nan"],
        ["--timeout", "1e308"],
        ["--min-busbw", "inf"],
        ["--sizes", "1:" + "9" * 400 + ":2"],
    ):
        done = doctor("run", *args, timeout=30)
        one_line_error(done)
        assert done.returncode == 2
    return done.returncode


@case("output-unwritable")
def _output_unwritable(tmp_path: Path) -> int:
    os.mkfifo(tmp_path / "nobody-reads")
    for target in ("/sys/kernel/ddp-doctor-report.json", str(tmp_path / "nobody-reads")):
        started = time.monotonic()
        done = doctor("run", "-o", target, timeout=30)
        one_line_error(done)
        assert time.monotonic() - started < 10  # refused before anything ran
    return done.returncode


@case("no-network")
def _no_network(tmp_path: Path) -> int:
    why = netns.why_unavailable()
    if why:
        pytest.skip(why)
    with netns.namespace() as name:
        argv = [sys.executable, "-m", "ddp_doctor", "run", "--format", "json", "--timeout", "30"]
        done = subprocess.run(
            netns.in_namespace(name, argv), capture_output=True, text=True, timeout=60
        )
    report = json.loads(done.stdout)
    assert "DDP209" in codes_in(done.stdout)
    job = next(p for p in report["probes"] if p["probe"] == "job")["facts"]
    assert job["launched"] is False
    return done.returncode


@case("url-credentials")
def _url_credentials(tmp_path: Path) -> int:
    secret = "S3cr3t-" + os.urandom(6).hex()
    raw = tmp_path / "raw.json"
    done = doctor(
        "run", "--format", "json", "--no-redact", "-o", str(raw),
        "--master-addr", f"tcp://trainer:{secret}@no-such-host.invalid",
        *FAST,
    )  # fmt: skip
    assert secret in raw.read_text()  # the input does carry it
    for fmt in ("table", "json", "markdown"):
        shown = doctor("diagnose", "-v", "--format", fmt, str(raw), timeout=30)
        assert secret not in shown.stdout + shown.stderr, fmt
        assert "trainer:<redacted>@" in shown.stdout, fmt
    return done.returncode


# --- issue 19: trust under hostile input (tests/fault_cases_trust.py) -------------------------

CASES.update(TRUST_CASES)


# --- the matrix ------------------------------------------------------------------------------


def test_every_documented_fault_has_a_case_and_every_case_a_row() -> None:
    assert set(documented()) == set(CASES)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "key",
    [
        pytest.param(key, marks=pytest.mark.slow) if key in SLOW_CASES else key
        for key in sorted(CASES)
    ],
)
def test_fault(key: str, tmp_path: Path) -> None:
    started = time.monotonic()
    assert CASES[key](tmp_path) == documented()[key]
    assert time.monotonic() - started < 90
