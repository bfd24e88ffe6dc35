"""The fault-matrix cases of issue 19 (trust under hostile input), one per README row of
"Faults the doctor withstands"; tests/test_fault_matrix.py runs them with the others. Each
returns the exit code the row documents, after asserting what the row promises."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hostile
from click.testing import CliRunner

from ddp_doctor import cli

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"
LOG = ROOT / "fixtures" / "logs" / "barrier_rank_missing_torch2.log"
FAST = ["--sizes", "1K:64K:8", "--iters", "2"]
RAW_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
TRUST_CASES: dict[str, Callable[[Path], int]] = {}
# Cases that start a real job or a traced run (seconds each): the slow tier only.
SLOW_CASES = frozenset(
    {"small-shm-job", "emfile", "python-hangs", "trace-stopped-at-limit", "trace-sigkill",
     "trace-setsid-grandchild"}
)  # fmt: skip


def case(key: str) -> Callable[[Callable[[Path], int]], Callable[[Path], int]]:
    def register(function: Callable[[Path], int]) -> Callable[[Path], int]:
        TRUST_CASES[key] = function
        return function

    return register


def doctor(*args: str, timeout: float = 60, **options: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddp_doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **options,  # type: ignore[arg-type]
    )


def one_line(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddp-doctor: error:"), stderr


def codes(stdout: str) -> list[str]:
    return [finding["code"] for finding in json.loads(stdout)["findings"]]


def report_file(tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    report = json.loads(HEALTHY.read_text())
    edit(report)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def probe(report: dict, name: str) -> dict:
    return next(p for p in report["probes"] if p["probe"] == name)


# --- exit codes that tell the truth ------------------------------------------------------------


@case("failed-job-small-shm")
def _failed_job_small_shm(tmp_path: Path) -> int:
    def edit(report: dict) -> None:
        probe(report, "job")["facts"]["exit_code"] = 1
        probe(report, "host")["facts"]["shm_total_bytes"] = 64 << 20

    done = doctor("diagnose", "--format", "json", str(report_file(tmp_path, edit)))
    assert {"DDP008", "DDP308"} <= set(codes(done.stdout))
    return done.returncode


@case("small-shm-job")
def _small_shm_job(tmp_path: Path) -> int:
    """A real job that fails, /dev/shm a 64 MiB tmpfs in a mount namespace of its own."""
    program = tmp_path / "run.py"
    program.write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from fakes import job_fault\nfrom ddp_doctor.cli import main\n"
        "with job_fault('1:allreduce:exit'):\n"
        f"    main(['run', '--format', 'json', '--timeout', '60', *{FAST!r}])\n"
    )
    script = f"mount -t tmpfs -o size=64m tmpfs /dev/shm && exec {sys.executable} {program}"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=100
    )
    findings = json.loads(done.stdout)["findings"]
    assert "DDP008" in [f["code"] for f in findings]
    assert [f for f in findings if f["severity"] == "error"]
    return done.returncode


@case("emfile")
def _emfile(tmp_path: Path) -> int:
    argv = " ".join([sys.executable, "-m", "ddp_doctor", "run", "--format", "json", *FAST])
    done = subprocess.run(
        ["sh", "-c", f"ulimit -n 12; exec {argv}"], capture_output=True, text=True, timeout=100
    )
    errors = [f for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"]
    assert errors, done.stdout[-2000:]
    return done.returncode


@case("python-hangs")
def _python_hangs(tmp_path: Path) -> int:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec sleep 300\n")
    python.chmod(0o755)
    done = doctor("run", "--python", str(python), "--timeout", "4", "--format", "json")
    assert codes(done.stdout) == ["DDP012"]
    return done.returncode


@case("trace-stopped-at-limit")
def _trace_stopped_at_limit(tmp_path: Path) -> int:
    script = tmp_path / "computes.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    done = doctor("trace", "--timeout", "5", "--format", "json", "--", sys.executable, str(script))
    assert codes(done.stdout) == ["DDP908"]
    return done.returncode


@case("trace-bad-numbers")
def _trace_bad_numbers(tmp_path: Path) -> int:
    for args in (["--timeout", "nan"], ["--timeout", "1e18"], ["--hang-after", "nan"],
                 ["--steps", "9" * 5000]):  # fmt: skip
        done = doctor("trace", *args, "--", sys.executable, "x.py", timeout=30)
        one_line(done.stderr)
        assert not list(tmp_path.iterdir())
    return done.returncode


# --- standard streams --------------------------------------------------------------------------


@case("reader-gone")
def _reader_gone(tmp_path: Path) -> int:
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ddp_doctor", "rules", "--format", "json"],
            stdout=write, stderr=subprocess.PIPE, timeout=30,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.stderr == b""
    return done.returncode


@case("stdout-full")
def _stdout_full(tmp_path: Path) -> int:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "ddp_doctor", "logs", str(LOG)],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=30,
        )  # fmt: skip
    one_line(done.stderr)
    return done.returncode


def _closed(descriptor: int) -> subprocess.CompletedProcess:
    program = (
        f"import os, runpy, sys; os.close({descriptor}); "
        f"sys.argv = ['ddp-doctor', 'logs', {str(LOG)!r}]; "
        "runpy.run_module('ddp_doctor', run_name='__main__')"
    )
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30
    )


@case("stdout-closed")
def _stdout_closed(tmp_path: Path) -> int:
    done = _closed(1)
    one_line(done.stderr)
    assert "standard output is closed" in done.stderr
    return done.returncode


@case("stderr-closed")
def _stderr_closed(tmp_path: Path) -> int:
    done = _closed(2)
    assert "DDP" in done.stdout  # the report, with the report's exit code
    return done.returncode


@case("cwd-gone")
def _cwd_gone(tmp_path: Path) -> int:
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"cd {gone} && rmdir {gone} && exec {sys.executable} -m ddp_doctor check x.py"
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    one_line(done.stderr)
    return done.returncode


# --- writes ------------------------------------------------------------------------------------


@case("output-symlink")
def _output_symlink(tmp_path: Path) -> int:
    (tmp_path / "precious").write_text("keep")
    (tmp_path / "report.md").symlink_to(tmp_path / "precious")
    done = doctor("logs", str(LOG), "-o", str(tmp_path / "report.md"))
    one_line(done.stderr)
    assert (tmp_path / "precious").read_text() == "keep"
    return done.returncode


@case("output-own-input")
def _output_own_input(tmp_path: Path) -> int:
    log = tmp_path / "train.log"
    log.write_bytes(LOG.read_bytes())
    done = doctor("logs", str(log), "-o", str(log))
    one_line(done.stderr)
    assert log.read_bytes() == LOG.read_bytes()
    return done.returncode


@case("output-disk-full")
def _output_disk_full(tmp_path: Path) -> int:
    report = tmp_path / "report.md"
    report.write_text("previous\n")
    real_fsync = os.fsync

    def full(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    os.fsync = full  # type: ignore[assignment]
    try:
        result = CliRunner().invoke(cli.cli, ["logs", str(LOG), "-o", str(report)])
    finally:
        os.fsync = real_fsync
    assert report.read_text() == "previous\n" and len(list(tmp_path.iterdir())) == 1
    return result.exit_code


@case("trace-sigkill")
def _trace_sigkill(tmp_path: Path) -> int:
    return 128 - sigkill_trace_mid_run(tmp_path)[0]


def sigkill_trace_mid_run(tmp_path: Path) -> tuple[int, Path]:
    """`trace` of a sleeping script, SIGKILLed once the script runs and the monitor's watchdog
    is up; the doctor's exit status and the script, once its temporary folder is empty again
    (the ranks' watchdog removes it: asserted within 10 s)."""
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(120)\n")
    folder = tmp_path / "tmp"
    folder.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "ddp_doctor", "trace", "--timeout", "100", "--",
         sys.executable, str(script)],
        env={**os.environ, "TMPDIR": str(folder)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not list(folder.glob("ddp-doctor-trace-*/ranks/*")):
        assert time.monotonic() < deadline, "the traced script never started"
        time.sleep(0.1)
    time.sleep(1.0)  # the monitor's watchdog is up
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while list(folder.iterdir()):
        assert time.monotonic() < deadline, list(folder.rglob("*"))[:5]
        time.sleep(0.1)
    return process.returncode, script


@case("trace-setsid-grandchild")
def _trace_setsid(tmp_path: Path) -> int:
    marker = f"ddp-doctor-matrix-{os.getpid()}-{time.monotonic_ns()}"
    script = tmp_path / "daemonises.py"
    script.write_text(
        "import subprocess, sys\n"
        f"code = 'import time; time.sleep(300)  # {marker}'\n"
        "subprocess.run([sys.executable, '-c', 'import subprocess, sys; "
        'subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True)\', '
        "code], check=True)\n"
    )
    done = doctor("trace", "--timeout", "60", "--", sys.executable, str(script), timeout=100)
    left = [e.name for e in os.scandir("/proc") if e.name.isdigit() and _mentions(e.name, marker)]
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert not left
    return done.returncode


def _mentions(pid: str, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return marker.encode() in handle.read()
    except OSError:
        return False


@case("logs-dir-over-limit")
def _logs_dir_over_limit(tmp_path: Path) -> int:
    deep = tmp_path.joinpath(*"abcdefghij")
    deep.mkdir(parents=True)
    (deep / "rank1.log").write_bytes(LOG.read_bytes())
    (tmp_path / "rank0.log").write_text("[rank0]: step 1 loss 0.5\n")
    done = doctor("logs", "--format", "json", str(tmp_path))
    (note,) = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "DDP907"]
    assert note["evidence"]["folders_too_deep"] == 1
    return done.returncode


# --- hostile inputs ----------------------------------------------------------------------------


@case("secrets-everywhere")
def _secrets_everywhere(tmp_path: Path) -> int:
    secret = "S3cr3t" + os.urandom(6).hex()
    lines = [f"NCCL WARN HF_TOKEN={secret}1", f"ERROR: PASSWORD={secret}2",
             f"{{'hf_token': '{secret}3'}}", f"Authorization: token {secret}4",
             f"DB_PASS = {secret}5", f"MYSQL_PWD={secret}6"]  # fmt: skip

    def edit(report: dict) -> None:
        job = probe(report, "job")["facts"]
        job["exit_code"], job["output_tail"] = 1, "\n".join(lines)

    path = report_file(tmp_path, edit)
    for fmt in ("table", "json", "markdown"):
        done = doctor("diagnose", "-v", "--format", fmt, str(path))
        assert secret not in done.stdout + done.stderr, fmt
    return done.returncode


@case("control-sequences")
def _control_sequences(tmp_path: Path) -> int:
    def edit(report: dict) -> None:
        probe(report, "host")["facts"]["hostname"] = "n\x1b]0;pwned\x07\x9b2J\u202eexe"

    done = doctor("diagnose", "-v", str(report_file(tmp_path, edit)))
    assert not RAW_CONTROLS.search(done.stdout)
    return done.returncode


@case("markdown-injection")
def _markdown_injection(tmp_path: Path) -> int:
    def edit(report: dict) -> None:
        job = probe(report, "job")["facts"]
        job["exit_code"] = 1
        job["output_tail"] = "x\n````\n</details>\n<img src=x onerror=alert(1)> @octocat | y"

    done = doctor("diagnose", "--format", "markdown", str(report_file(tmp_path, edit)))
    text = done.stdout
    fold = text[text.index("<summary>job output") :].splitlines()
    assert fold[2].startswith("`````") and "<img" not in text.split("<details>")[0]
    return done.returncode


@case("hostile-dump")
def _hostile_dump(tmp_path: Path) -> int:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(dict(hostile.dumps())["pickle-shared-lists"]["nccl_trace_rank_0"])
    started = time.monotonic()
    done = doctor("logs", str(path))
    assert time.monotonic() - started < 20
    one_line(done.stderr)
    return done.returncode


@case("far-sequence-ids")
def _far_sequence_ids(tmp_path: Path) -> int:
    for name, data in dict(hostile.dumps())["json-far-sequence-ids"].items():
        (tmp_path / name).write_bytes(data)
    started = time.monotonic()
    done = doctor("logs", "--format", "json", str(tmp_path))
    assert time.monotonic() - started < 20 and "DDP302" in codes(done.stdout)
    return done.returncode


@case("huge-count-report")
def _huge_count_report(tmp_path: Path) -> int:
    path = tmp_path / "report.json"
    path.write_bytes(dict(hostile.reports())["multinode-node-missing-node0-ints-1e12"])
    done = doctor("diagnose", str(path))
    one_line(done.stderr)
    return done.returncode


@case("hostlist-product")
def _hostlist_product(tmp_path: Path) -> int:
    env = {**os.environ, "SLURM_JOB_NODELIST": "n[0-99999][0-99999]", "SLURM_NNODES": "2",
           "SLURM_NODEID": "0", "SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}  # fmt: skip
    started = time.monotonic()
    done = doctor("run", "--no-jobs", env=env)
    assert time.monotonic() - started < 20
    one_line(done.stderr)
    return done.returncode
