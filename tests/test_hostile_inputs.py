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
# The 2 s, as CPU time (wall time on two cores shared by eight developers says little)
# with room for tracemalloc's overhead, which triples it.
TIME_BOUND_S = 20.0


def measured(call: Callable[[], Result]) -> tuple[Result, float, int]:
    tracemalloc.start()
    started = time.process_time()
    try:
        result = call()
        seconds = time.process_time() - started
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


# The README's "Limits on input" rows and the test that holds each (issue 19, item 7).
LIMIT_ROWS = {
    "a file `check` reads": "test_limits.py",
    "`pyproject.toml` / `.gitignore` that `check` reads": "test_limits.py",
    "a log file for `logs` (after decompression and decoding)": "test_limits.py",
    "a log on stdin (`logs -`)": "test_fault_matrix.py",
    "a report for `diagnose`": "test_limits.py",
    "numbers and counts in a report": "test_hostile_inputs.py",
    "a flight-recorder dump (`logs`)": "test_hostile_inputs.py",
    "a log line": "test_output_writes.py",
    "`logs DIR`": "test_output_writes.py",
    "a SLURM host list": "test_fault_matrix.py",
    "numeric options": "test_exit_truth.py",
}


def test_every_limit_row_is_held_by_a_test_and_states_the_code_s_limits() -> None:
    from ddp_doctor.flightrec import safe_pickle
    from ddp_doctor.logscan import inputs
    from ddp_doctor.readings import hostlist
    from ddp_doctor.report_io import MAX_NODES, MAX_RANKS

    readme = (hostile.ROOT / "README.md").read_text()
    table = readme[readme.index("### Limits on input") : readme.index("### `ddp-doctor explain")]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ")]
    assert set(rows[1:]) == set(LIMIT_ROWS)  # the header row first
    for row, test_file in LIMIT_ROWS.items():
        assert (hostile.ROOT / "tests" / test_file).exists(), row
    for figure in (
        f"{MAX_NODES:,}",
        f"{MAX_RANKS:,}",
        f"{safe_pickle.MAX_COPIED:,}",
        f"{safe_pickle.MAX_ELEMENTS:,}",
        f"{safe_pickle.MAX_INT_BITS} bits",
        f"nesting {safe_pickle.MAX_DEPTH} deep",
        f"{inputs.MAX_FILES:,} files",
        f"{inputs.MAX_DEPTH} levels",
        f"{hostlist.MAX_HOSTS:,} hosts",
        f"{hostlist.MAX_DIGITS} digits",
    ):
        assert figure in table, figure
