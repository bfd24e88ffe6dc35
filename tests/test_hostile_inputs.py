"""Every reader bounded by its input's size (issue 19): each hostile input of tests/hostile.py,
all under 1 MB, is handled with one result (a report, or one clear line and exit 2) within the
issue's memory bound (200 MB, measured with tracemalloc) and a time bound generous enough for a
loaded 2-core machine (the real figures: bench/bench_hostile_inputs.py)."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import hostile
import pytest
from click.testing import CliRunner, Result

from ddp_doctor import cli
from ddp_doctor.flightrec.dumps import DumpError, read_dump

MEMORY_BOUND = 200 * 1024**2
TIME_BOUND_S = 20.0  # the 2 s, with room for eight developers on two cores


def measured(call: Callable[[], Result]) -> tuple[Result, float, int]:
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = call()
        seconds = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, seconds, peak


def doctor(*args: str) -> Result:
    return CliRunner().invoke(cli.cli, list(args))


def assert_handled(result: Result, seconds: float, peak: int) -> None:
    assert result.exit_code in (0, 1, 2), result.output[-2000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert seconds < TIME_BOUND_S, seconds
    assert peak < MEMORY_BOUND, peak


@pytest.mark.parametrize(("name", "files"), list(hostile.dumps()), ids=lambda v: str(v)[:40])
def test_a_hostile_dump_is_read_within_bounds(
    name: str, files: dict[str, bytes], tmp_path: Path
) -> None:
    for file_name, data in files.items():
        assert len(data) < hostile.LIMIT_BYTES, (name, len(data))
        (tmp_path / file_name).write_bytes(data)
    target = tmp_path if len(files) > 1 else tmp_path / next(iter(files))
    result, seconds, peak = measured(lambda: doctor("logs", "--format", "json", str(target)))
    assert_handled(result, seconds, peak)


@pytest.mark.parametrize(("name", "data"), list(hostile.reports()), ids=lambda v: str(v)[:40])
def test_a_hostile_report_is_judged_within_bounds(name: str, data: bytes, tmp_path: Path) -> None:
    assert len(data) < hostile.LIMIT_BYTES
    (tmp_path / "report.json").write_bytes(data)
    for fmt in ("table", "json", "markdown"):
        args = ("diagnose", "-v", "--format", fmt, str(tmp_path / "report.json"))
        result, seconds, peak = measured(lambda args=args: doctor(*args))
        assert_handled(result, seconds, peak)


@pytest.mark.parametrize(("name", "data"), list(hostile.logs()), ids=lambda v: str(v)[:40])
def test_a_hostile_log_is_scanned_within_bounds(name: str, data: bytes, tmp_path: Path) -> None:
    assert len(data) < hostile.LIMIT_BYTES
    (tmp_path / "train.log").write_bytes(data)
    result, seconds, peak = measured(lambda: doctor("logs", "-v", str(tmp_path / "train.log")))
    assert_handled(result, seconds, peak)
    assert "\x1b" not in result.stdout and "\x9b" not in result.stdout


def test_shared_structure_is_refused_not_expanded(tmp_path: Path) -> None:
    """500 bytes of memo-shared lists once took 1-2 GB and a minute."""
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(dict(hostile.dumps())["pickle-shared-lists"]["nccl_trace_rank_0"])
    with pytest.raises(DumpError, match="shared structure"):
        read_dump(path)


@pytest.mark.parametrize(
    "name", ["pickle-deep-append", "pickle-deep-tuple1", "pickle-deep-setitem"]
)
def test_depth_counts_on_every_container_opcode(name: str, tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(dict(hostile.dumps())[name]["nccl_trace_rank_0"])
    with pytest.raises(DumpError, match="nested deeper"):
        read_dump(path)


def test_sequence_ids_far_apart_compare_as_the_entries_present(tmp_path: Path) -> None:
    """Ids 0 and 10^15 once made `logs` loop for years; rank 1 stops one short of rank 0."""
    for file_name, data in dict(hostile.dumps())["json-far-sequence-ids"].items():
        (tmp_path / file_name).write_bytes(data)
    result, seconds, _ = measured(lambda: doctor("logs", "--format", "json", str(tmp_path)))
    assert seconds < TIME_BOUND_S and result.exit_code in (0, 1)
