"""Memory stays under 200 MB for any input up to the documented limits (README, "Limits on
input"), measured as the peak resident memory of a real `ddp-doctor` process at the limit; and
one step past the limit the input is refused or cut, not read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_doctor.commands.logs import MAX_LOG_BYTES
from ddp_doctor.inputs import describe_size
from ddp_doctor.report_io import MAX_REPORT_BYTES
from ddp_doctor.script.files import MAX_TOKENS

HERE = Path(__file__).resolve().parent
HEALTHY = HERE.parent / "fixtures" / "jobs" / "healthy-2rank-gloo.json"
MEMORY_LIMIT = 200 * 1024 * 1024
TOKEN = re.compile(r"\w+|[^\w\s]|\n")  # files.py counts tokens this way


def peak(*argv: str, endless_stdin: str | None = None) -> tuple[int, int]:
    """(exit code, peak resident bytes) of `ddp-doctor ARGV` alone."""
    feed = ["--endless-stdin", endless_stdin] if endless_stdin else []
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "peak_rss.py"),
            *feed,
            sys.executable,
            "-m",
            "ddp_doctor",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=True,
    )
    code, rss = done.stdout.split()
    return int(code), int(rss)


def at_token_limit(unit: str, head: str = "", tail: str = "\n", extra: int = 0) -> str:
    """head + unit * n + tail with exactly MAX_TOKENS + extra tokens (when the unit allows)."""
    per = len(TOKEN.findall(unit))
    fixed = len(TOKEN.findall(head + tail))
    text = head + unit * ((MAX_TOKENS - fixed) // per) + tail
    count = len(TOKEN.findall(text))
    return text + "\n" * (MAX_TOKENS + extra - count)


# The densest shapes measured: most AST nodes and findings per token.
DENSE = {
    "one-name-statements.py": ("a\n", "", "\n"),
    "assignments.py": ("x = 1\n", "", "\n"),
    "calls-on-one-line.py": ("f(1);", "", "\n"),
    "names-in-a-list.py": ("a,", "x = [", "]\n"),
    "deprecated-variables.yaml": ("NCCL_BLOCKING_WAIT=1\n", "", "\n"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(DENSE))
def test_check_at_its_token_limit(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(at_token_limit(*DENSE[name]))
    code, rss = peak("check", "--format", "json", str(path))
    assert code in (0, 1)  # checked, not skipped (that would be 2: nothing checked)
    assert rss < MEMORY_LIMIT, f"{rss / 2**20:.0f} MiB"


def test_check_skips_one_token_past_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(at_token_limit("a\n", extra=1))
    done = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "check", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["code"] == "DDP911" and "tokens" in finding["message"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_logs_at_its_limit(tmp_path: Path) -> None:
    """An endless stdin: read to the limit, then reported (DDP907) with flat memory."""
    line = r"[rank0]: step 1234 loss 0.12345 lr 1e-4 throughput 123.4 samples/s\n"
    code, rss = peak("logs", "-", "--format", "json", endless_stdin=line)
    assert code == 0
    assert rss < MEMORY_LIMIT, f"{rss / 2**20:.0f} MiB"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_logs_memory_is_flat_when_every_line_matches(tmp_path: Path) -> None:
    """The slowest lines to scan (every one a candidate for several patterns), 16 MiB of them:
    memory does not grow with what matches."""
    line = "[rank1]:[W] NCCL WARN Connection refused, remote=[127.0.0.1]:29500 Timed out\n"
    path = tmp_path / "train.log"
    path.write_text(line * (16 * 2**20 // len(line)))
    code, rss = peak("logs", str(path), "--format", "json")
    assert code == 1
    assert rss < MEMORY_LIMIT, f"{rss / 2**20:.0f} MiB"
    assert MAX_LOG_BYTES == 256 * 2**20  # what the README and DDP907 say


def report_of_failed_ranks(size: int) -> str:
    """A valid report of `size` bytes whose job has as many failed ranks as fit: the shape
    that costs the most memory per byte (each rank becomes several objects)."""
    report = json.loads(HEALTHY.read_text())
    job = next(p for p in report["probes"] if p["probe"] == "job")["facts"]
    rank = {
        "rank": 0,
        "exit_code": 1,
        "stages": [
            {
                "stage": "init",
                "ended": True,
                "ok": False,
                "seconds": 30.0,
                "error": "Timed out after 30 seconds waiting for clients. 1/2 clients joined",
            }
        ],
    }
    base = len(json.dumps(report))
    count = (size - base) // (len(json.dumps(dict(rank, rank=99999))) + 2)
    job.update(
        exit_code=1, identities=[], nproc=count, ranks=[dict(rank, rank=r) for r in range(count)]
    )
    text = json.dumps(report)
    return text + " " * (size - len(text.encode()))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_diagnose_at_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(report_of_failed_ranks(MAX_REPORT_BYTES))
    code, rss = peak("diagnose", str(path), "--format", "json")
    assert code == 1
    assert rss < MEMORY_LIMIT, f"{rss / 2**20:.0f} MiB"


def test_diagnose_refuses_one_byte_past_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(report_of_failed_ranks(MAX_REPORT_BYTES + 1))
    done = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "diagnose", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and f"over the {describe_size(MAX_REPORT_BYTES)}" in done.stderr


def test_a_log_file_over_its_cap_is_read_from_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root cause of a failed run is at its end: a file over the cap keeps its last part."""
    from ddp_doctor.commands import logs

    monkeypatch.setattr(logs, "MAX_FILE_LOG_BYTES", 4096)
    path = tmp_path / "big.log"
    early = "RuntimeError: CUDA error: out of memory\n"
    late = "RuntimeError: CUDA error: device-side assert triggered\n"
    path.write_text(early + "step ok\n" * 2000 + late)
    scan = logs._scan(str(path))
    codes = [finding.code for finding in scan.findings]
    assert scan.skipped_bytes > 0 and "DDP506" in codes and "DDP505" not in codes
    [note] = logs._truncation(scan, str(path))
    assert note.code == "DDP907" and note.evidence["bytes_skipped"] == scan.skipped_bytes
