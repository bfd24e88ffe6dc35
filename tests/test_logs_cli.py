"""`ddp-doctor logs`: its exit codes, its output contract, and input that is not a clean log.

Bad input always ends in one line on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "logs"
USAGE, FINDINGS, OK = 2, 1, 0
OOM_LINE = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
NCCL_WARN_LINE = (
    "node:1:2 [0] NCCL WARN Could not find a path for pattern 4, falling back to simple order\n"
)

Invoke = Callable[..., Result]


def assert_one_line_error(result: Result, *words: str) -> None:
    assert result.exit_code == USAGE, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddp-doctor: error:"), result.stderr
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0]


def json_codes(result: Result) -> list[str]:
    return [finding["code"] for finding in json.loads(result.stdout)["findings"]]


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


# --- findings and exit codes -----------------------------------------------------------------
def test_a_failed_run_exits_1_with_findings_root_cause_first(invoke: Invoke) -> None:
    log = FIXTURES / "cuda_oom_two_nodes_slurm.log"
    result = invoke("logs", str(log), "--format", "json")
    assert result.exit_code == FINDINGS, result.output
    assert json_codes(result) == ["DDP505", "DDP307", "DDP302", "DDP514", "DDP503"]
    first = json.loads(result.stdout)["findings"][0]
    assert first["location"] == {"path": str(log), "line": 12, "column": None}
    assert first["evidence"]["line"] == 12 and "CUDA out of memory" in first["evidence"]["text"]


def test_a_clean_log_exits_0(invoke: Invoke) -> None:
    result = invoke("logs", str(FIXTURES / "clean_run_nccl_info.log"), "--format", "json")
    assert result.exit_code == OK, result.output
    assert json_codes(result) == []


@pytest.mark.parametrize(("fail_on", "exit_code"), [("error", OK), ("warning", FINDINGS)])
def test_fail_on_sets_the_threshold(
    invoke: Invoke, tmp_path: Path, fail_on: str, exit_code: int
) -> None:
    log = write(tmp_path / "warn.log", NCCL_WARN_LINE.encode())
    result = invoke("logs", log, "--fail-on", fail_on, "--format", "json")
    assert result.exit_code == exit_code
    assert json_codes(result) == ["DDP503"]


def test_select_and_ignore_filter_by_code_prefix_and_name(invoke: Invoke) -> None:
    log = str(FIXTURES / "cuda_oom_two_nodes_slurm.log")
    selected = invoke("logs", log, "--select", "DDP5", "--format", "json")
    assert json_codes(selected) == ["DDP505", "DDP514", "DDP503"]
    ignored = invoke("logs", log, "--ignore", "rank-crashed,DDP503", "--format", "json")
    assert json_codes(ignored) == ["DDP505", "DDP302", "DDP514"]


def test_an_unknown_selector_is_a_usage_error(invoke: Invoke) -> None:
    result = invoke("logs", str(FIXTURES / "ecc_error.log"), "--select", "DDP5999")
    assert result.exit_code == USAGE
    assert "Traceback" not in result.output


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_every_format_renders(invoke: Invoke, fmt: str) -> None:
    result = invoke("logs", str(FIXTURES / "duplicate_gpu.log"), "--format", fmt)
    assert result.exit_code == FINDINGS
    assert "DDP305" in result.stdout


def test_output_writes_the_report_to_a_file(invoke: Invoke, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    log = str(FIXTURES / "ready_twice.log")
    result = invoke("logs", log, "--format", "json", "--output", str(report))
    assert result.exit_code == FINDINGS
    assert [f["code"] for f in json.loads(report.read_text())["findings"]] == ["DDP502", "DDP307"]


# --- stdin ---------------------------------------------------------------------------------
def test_stdin_is_read_with_a_dash(invoke: Invoke) -> None:
    result = invoke("logs", "-", "--format", "json", input=OOM_LINE.encode())
    assert result.exit_code == FINDINGS
    [finding] = json.loads(result.stdout)["findings"]
    assert finding["code"] == "DDP505" and finding["location"] is None
    assert finding["evidence"]["rank"] == 1


def test_empty_stdin_is_an_error(invoke: Invoke) -> None:
    assert_one_line_error(invoke("logs", "-", input=b""), "stdin", "empty")


# --- bad input -----------------------------------------------------------------------------
def test_a_missing_file(invoke: Invoke, tmp_path: Path) -> None:
    assert_one_line_error(invoke("logs", str(tmp_path / "nope.log")), "nope.log", "no such file")


def test_an_empty_folder(invoke: Invoke, tmp_path: Path) -> None:
    empty = tmp_path / "run"
    empty.mkdir()
    assert_one_line_error(invoke("logs", str(empty)), "no text logs or flight-recorder dumps")


def test_an_empty_file(invoke: Invoke, tmp_path: Path) -> None:
    assert_one_line_error(invoke("logs", write(tmp_path / "e.log", b"")), "empty")


def test_binary_garbage(invoke: Invoke, tmp_path: Path) -> None:
    garbage = bytes(range(256)) * 64 + OOM_LINE.encode()
    log = write(tmp_path / "core.bin", garbage)
    assert_one_line_error(invoke("logs", log), "does not look like a text log")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file(invoke: Invoke, tmp_path: Path) -> None:
    log = Path(write(tmp_path / "secret.log", OOM_LINE.encode()))
    log.chmod(0)
    assert_one_line_error(invoke("logs", str(log)), "permission denied")


def test_non_utf8_bytes_are_read_with_a_note(invoke: Invoke, tmp_path: Path) -> None:
    latin1 = "Données prêtes, étape 3\n".encode("latin-1") + b"\xff\xfe\x80 " + OOM_LINE.encode()
    result = invoke("logs", write(tmp_path / "latin1.log", latin1), "--format", "json")
    assert result.exit_code == FINDINGS, result.output
    assert json_codes(result) == ["DDP505"]
    assert "not valid UTF-8" in result.stderr
    json.loads(result.stdout)  # the note stays out of the JSON


def test_a_utf16_log_from_powershell_is_read(invoke: Invoke, tmp_path: Path) -> None:
    text = "PS C:\\> python train.py\r\n" + OOM_LINE.replace("\n", "\r\n")
    log = write(tmp_path / "ps.log", codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    result = invoke("logs", log, "--format", "json")
    assert json_codes(result) == ["DDP505"]
    assert json.loads(result.stdout)["findings"][0]["evidence"]["line"] == 2


def test_a_gzipped_log_is_read(invoke: Invoke, tmp_path: Path) -> None:
    data = gzip.compress((FIXTURES / "invalid_ordinal.log").read_bytes())
    result = invoke("logs", write(tmp_path / "run.log.gz", data), "--format", "json")
    assert json_codes(result) == ["DDP027", "DDP307"]


def test_a_truncated_gzip_is_an_error(invoke: Invoke, tmp_path: Path) -> None:
    data = gzip.compress((FIXTURES / "invalid_ordinal.log").read_bytes() * 50)
    result = invoke("logs", write(tmp_path / "cut.log.gz", data[: len(data) // 2]))
    assert_one_line_error(result, "cut.log.gz")


# --- a folder of logs --------------------------------------------------------------------------
def test_a_folder_is_read_as_one_run_across_its_rank_logs(invoke: Invoke, tmp_path: Path) -> None:
    """rank 0's log shows it tokenising, rank 1's the timeout: together, DDP232."""
    (tmp_path / "attempt_0" / "0").mkdir(parents=True)
    (tmp_path / "attempt_0" / "1").mkdir(parents=True)
    rank0 = tmp_path / "attempt_0" / "0" / "stderr.log"
    rank1 = tmp_path / "attempt_0" / "1" / "stderr.log"
    rank0.write_text(
        "Running tokenizer on dataset:  97%|#########7| 970/1000 [31:02<00:57, 1.1ba/s]\n"
    )
    rank1.write_text(
        "[rank1]: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and "
        "retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but "
        "store->get('0') got error: wait timeout after 1800000ms, keys: /default_pg//cuda//0\n"
    )
    (tmp_path / "checkpoint.pt").write_bytes(bytes(range(256)) * 256)
    result = invoke("logs", str(tmp_path), "--format", "json")
    assert result.exit_code == FINDINGS, result.output
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["code"] == "DDP232" and finding["evidence"]["elapsed"] == "31:02"
    assert finding["location"]["path"] == str(rank1) and finding["location"]["line"] == 1
