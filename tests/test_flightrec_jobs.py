"""Flight-recorder dumps of a real gloo job (tests/flightrec_job.py, two ranks on CPU) name the
collective one rank skipped and the ranks on each side, read as pickles and as JSON, alone and
through `ddp-doctor logs DIR`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from ddp_doctor.flightrec.record import read_flight_record

pytestmark = pytest.mark.slow  # real jobs, subprocess runs or wheel builds

JOB = Path(__file__).resolve().parent / "flightrec_job.py"
JOB_TIMEOUT_S = 90  # two torch imports on a loaded 2-core machine


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fr")
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env |= {"WORLD_SIZE": "2", "TORCH_FR_BUFFER_SIZE": "100"}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(JOB), str(folder)],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for rank in (0, 1)
    ]
    try:
        outputs = [rank.communicate(timeout=JOB_TIMEOUT_S)[0] for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                os.killpg(rank.pid, signal.SIGKILL)
                rank.wait()
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    return folder


def _by_code(findings: list) -> dict[str, list]:  # type: ignore[type-arg]
    grouped: dict[str, list] = {}  # type: ignore[type-arg]
    for finding in findings:
        grouped.setdefault(finding.code, []).append(finding)
    return grouped


@pytest.mark.parametrize("pattern", ["fr_trace_*", "fr_json_*.json"])
def test_the_skipped_collective_and_the_rank_that_skipped_it(dumps: Path, pattern: str) -> None:
    record = read_flight_record(sorted(dumps.glob(pattern)))
    assert record.comparison.ranks == (0, 1)
    hangs = {f.evidence["group_desc"]: f for f in _by_code(record.findings)["DDP302"]}
    hang = hangs["default_pg"]
    assert hang.evidence["seq"] == 3
    assert hang.evidence["op"] == "all_reduce" and hang.evidence["input_sizes"] == [[5, 2]]
    assert hang.evidence["entered_ranks"] == [0]
    assert hang.evidence["never_reached_ranks"] == [1]
    behind = hang.evidence["sides"][1]
    assert behind == {**behind, "ranks": [1], "last_seq": 2, "last_op": "broadcast"}


@pytest.mark.parametrize("pattern", ["fr_trace_*", "fr_json_*.json"])
def test_mismatched_ops_and_dtypes_at_one_sequence_id(dumps: Path, pattern: str) -> None:
    record = read_flight_record(sorted(dumps.glob(pattern)))
    mismatches = {f.evidence["group_desc"]: f for f in _by_code(record.findings)["DDP304"]}
    guard, dtype = mismatches["guard"], mismatches["dtype"]
    assert guard.evidence["differs"] == ["op"] and guard.evidence["seq"] == 1
    assert [(s["ranks"], s["op"]) for s in guard.evidence["sides"]] == [
        ([0], "all_reduce"),
        ([1], "barrier"),
    ]
    assert dtype.evidence["differs"] == ["dtypes"]
    assert [s["input_dtypes"] for s in dtype.evidence["sides"]] == [["float32"], ["int32"]]


@pytest.mark.parametrize("pattern", ["fr_trace_*", "fr_json_*.json"])
def test_the_guarded_collective_is_a_hang_as_well_as_a_mismatch(dumps: Path, pattern: str) -> None:
    """Rank 0 waits in the guard group's all_reduce, rank 1 in its barrier: the same verdict
    trace gives a hang under a rank guard (DDP304 and DDP302, at one sequence number)."""
    record = read_flight_record(sorted(dumps.glob(pattern)))
    hangs = {f.evidence["group_desc"]: f for f in _by_code(record.findings)["DDP302"]}
    guard = hangs["guard"].evidence
    assert (guard["seq"], guard["op"], guard["waiting_ranks"]) == (1, "all_reduce", [0])
    assert guard["never_reached_ranks"] == [1] and "dtype" not in hangs


def test_pickle_dumps_name_where_each_rank_called(dumps: Path) -> None:
    record = read_flight_record(sorted(dumps.glob("fr_trace_*")))
    hang = next(f for f in record.findings if f.evidence.get("group_desc") == "default_pg")
    assert hang.code == "DDP302" and hang.evidence["caller"].startswith("flightrec_job.py:")
    assert hang.evidence["sides"][1]["last_caller"].startswith("flightrec_job.py:")


def test_logs_dir_reads_the_dumps_beside_a_log(
    dumps: Path, tmp_path: Path, invoke: Callable[..., Result]
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for dump in dumps.glob("fr_trace_*"):
        (folder / dump.name).write_bytes(dump.read_bytes())
    (folder / "rank0.log").write_text("epoch 0 step 10 loss 0.5\n")
    result = invoke("logs", str(folder), "--format", "json")
    assert result.exit_code == 1, result.output
    codes = [finding["code"] for finding in json.loads(result.stdout)["findings"]]
    assert codes[:2] == ["DDP302", "DDP304"]
