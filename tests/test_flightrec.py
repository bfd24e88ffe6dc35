"""The flight-recorder reader: pickles read as data only, dumps of every shape torch writes,
and the comparison of ranks on synthetic records."""

from __future__ import annotations

import json
import os
import pickle
import pickletools
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from ddp_doctor.facts.collectives import COMPLETED
from ddp_doctor.flightrec.dumps import DumpError, read_dump
from ddp_doctor.flightrec.record import read_flight_record
from ddp_doctor.flightrec.safe_pickle import BadPickle, UnsafePickle, load_plain

USAGE, FINDINGS = 2, 1
PLAIN = {"a": [1, 2.5, (3, "x"), None, True, False], "n": -(2**70), "t": (), "d": {}}


def entry(seq: int, op: str = "all_reduce", sizes: list | None = None, **extra: object) -> dict:  # type: ignore[type-arg]
    return {
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "profiling_name": f"nccl:{op}",
        "process_group": ["0", "default_pg"],
        "input_sizes": sizes if sizes is not None else [[1024]],
        "input_dtypes": ["Float"],
        "output_sizes": sizes if sizes is not None else [[1024]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "retired": True,
        "is_p2p": False,
        "timeout_ms": 600000,
        **extra,
    }


def write_dumps(folder: Path, per_rank: dict[int, list[dict]], fmt: str = "pickle") -> list[Path]:  # type: ignore[type-arg]
    paths = []
    for rank, entries in per_rank.items():
        document = {"version": "2.10", "entries": entries, "pg_config": {}, "pg_status": {}}
        path = folder / f"nccl_trace_rank_{rank}{'.json' if fmt == 'json' else ''}"
        if fmt == "json":
            path.write_text(json.dumps(document))
        else:
            path.write_bytes(pickle.dumps(document, protocol=2))
        paths.append(path)
    return paths


# --- the restricted reader --------------------------------------------------------------
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_plain_data_reads_back_in_every_protocol(protocol: int) -> None:
    assert load_plain(pickle.dumps(PLAIN, protocol=protocol)) == PLAIN


def test_shared_references_and_sets_read_back() -> None:
    shared = [1, 2]
    value = {"x": shared, "y": shared, "s": {1, 2}, "f": frozenset({3}), "b": b"raw"}
    assert load_plain(pickle.dumps(value, protocol=4)) == value


class Payload:
    """A pickle that, loaded with pickle.load, would create a folder."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:  # type: ignore[type-arg]
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_a_pickle_that_calls_is_refused_without_running(protocol: int, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UnsafePickle):
        load_plain(pickle.dumps(Payload(marker), protocol=protocol))
    assert not marker.exists()


@pytest.mark.parametrize(
    "data",
    [pickle.dumps(Path("x"), protocol=2), b"cos\nsystem\n(S'echo pwned'\ntR."],
    ids=["object", "protocol-0-global"],
)
def test_objects_and_imports_are_refused(data: bytes) -> None:
    with pytest.raises(UnsafePickle):
        load_plain(data)


def test_torchscript_list_builders_are_read_as_lists() -> None:
    data = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\n]q\x00(K\x01K\x02e\x85R."
    assert [op.name for op, _, _ in pickletools.genops(data)][2:4] == ["EMPTY_LIST", "BINPUT"]
    assert load_plain(data) == [1, 2]


@pytest.mark.parametrize(
    "data", [b"", b"not a pickle", pickle.dumps(PLAIN, protocol=2)[:-5]], ids=str
)
def test_truncated_or_foreign_bytes_are_a_bad_pickle(data: bytes) -> None:
    with pytest.raises(BadPickle):
        load_plain(data)


# --- one dump -----------------------------------------------------------------------------
def test_rank_comes_from_the_file_name_and_old_seq_id_is_read(tmp_path: Path) -> None:
    old = {k: v for k, v in entry(7).items() if k != "collective_seq_id"} | {"seq_id": 7}
    (path,) = write_dumps(tmp_path, {12: [old]})
    dump = read_dump(path)
    assert dump.rank == 12 and dump.entries[0].seq == 7 and dump.entries[0].op == "all_reduce"
    assert dump.entries[0].backend == "nccl" and dump.entries[0].state == COMPLETED


def test_pg_config_ranks_written_as_a_string_are_read(tmp_path: Path) -> None:
    path = tmp_path / "trace_3.json"
    path.write_text(json.dumps({"entries": [], "pg_config": {"0": {"ranks": "[0, 1, 2, 3]"}}}))
    assert read_dump(path).group_ranks == {"0": (0, 1, 2, 3)}


@pytest.mark.parametrize("content", [b"{}", b'{"entries": 3}', b"{not json"])
def test_a_file_that_is_no_dump_is_a_dump_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "trace_0.json"
    path.write_bytes(content)
    with pytest.raises(DumpError):
        read_dump(path)


# --- comparing ranks ----------------------------------------------------------------------
def test_a_rank_that_stopped_early_is_named_with_its_last_collective(tmp_path: Path) -> None:
    full = [entry(s) for s in range(1, 6)] + [entry(6, "broadcast", state="started", retired=False)]
    record = read_flight_record(write_dumps(tmp_path, {0: full, 1: full, 2: full[:4]}))
    (hang,) = record.findings
    assert hang.code == "DDP302"
    assert hang.evidence["seq"] == 5 and hang.evidence["entered_ranks"] == [0, 1]
    assert hang.evidence["never_reached_ranks"] == [2]
    assert hang.evidence["sides"][-1]["last_seq"] == 4


def test_only_the_sequence_ids_every_buffer_still_holds_are_compared(tmp_path: Path) -> None:
    """Ring buffers of different fill: rank 1 lost its first entries; nothing differs."""
    per_rank = {0: [entry(s) for s in range(1, 11)], 1: [entry(s) for s in range(6, 11)]}
    assert read_flight_record(write_dumps(tmp_path, per_rank)).findings == []


def test_different_shapes_at_one_sequence_id_are_a_mismatch(tmp_path: Path) -> None:
    per_rank = {r: [entry(1), entry(2, sizes=[[4, 3] if r == 0 else [3, 4]])] for r in (0, 1)}
    (mismatch,) = read_flight_record(write_dumps(tmp_path, per_rank, "json")).findings
    assert mismatch.code == "DDP304" and mismatch.evidence["seq"] == 2
    assert mismatch.evidence["differs"] == ["input sizes"]


def test_all_to_all_may_differ_in_shape_and_p2p_is_left_out(tmp_path: Path) -> None:
    per_rank = {
        r: [entry(1, "all_to_all", sizes=[[r + 1]]), entry(0, "send", is_p2p=True)] for r in (0, 1)
    }
    assert read_flight_record(write_dumps(tmp_path, per_rank)).findings == []


def test_gather_and_scatter_lists_exist_on_the_root_only(tmp_path: Path) -> None:
    """The root's gather output and scatter input are lists the other ranks never pass; the
    tensor every rank passes must agree (a scatter's output)."""

    def sides(op: str, out: list, inp: list) -> dict:  # type: ignore[type-arg]
        return entry(1, op) | {"input_sizes": inp, "output_sizes": out}

    gather = {0: [sides("gather", [[2, 2]], [[2]])], 1: [sides("gather", [], [[2]])]}
    assert read_flight_record(write_dumps(tmp_path, gather)).findings == []
    scatter = {0: [sides("scatter", [[2]], [[2, 2]])], 1: [sides("scatter", [[3]], [])]}
    (mismatch,) = read_flight_record(write_dumps(tmp_path, scatter)).findings
    assert mismatch.code == "DDP304" and mismatch.evidence["differs"] == ["output sizes"]


def test_a_collective_nobody_finished_is_a_symptom(tmp_path: Path) -> None:
    stuck = [entry(1), entry(2, state="started", retired=False)]
    record = read_flight_record(write_dumps(tmp_path, {0: stuck, 1: stuck}))
    assert [f.code for f in record.symptoms] == ["DDP302"] and not record.causes


def test_a_collective_one_rank_finished_and_another_still_shows_open_is_no_finding(
    tmp_path: Path,
) -> None:
    """No time in a dump says the open one is stuck: a state caught mid-update, as before."""
    per_rank = {0: [entry(1), entry(2)], 1: [entry(1), entry(2, state="started", retired=False)]}
    assert read_flight_record(write_dumps(tmp_path, per_rank)).findings == []


def test_an_unreadable_dump_is_ddp511_and_the_rest_is_compared(tmp_path: Path) -> None:
    paths = write_dumps(tmp_path, {0: [entry(1), entry(2)], 1: [entry(1)]})
    broken = tmp_path / "nccl_trace_rank_2"
    broken.write_bytes(pickle.dumps({"entries": []}, protocol=2)[:7])
    record = read_flight_record([*paths, broken])
    assert [f.code for f in record.findings] == ["DDP302", "DDP511"]
    assert record.findings[1].evidence["path"] == str(broken)


# --- the CLI -------------------------------------------------------------------------------
def test_logs_of_a_folder_without_logs_or_dumps_is_a_usage_error(
    tmp_path: Path, invoke: Callable[..., Result]
) -> None:
    (tmp_path / "model.bin").write_bytes(bytes(range(256)) * 64)
    result = invoke("logs", str(tmp_path))
    assert result.exit_code == USAGE and "no text logs or flight-recorder dumps" in result.stderr


def test_logs_of_a_refused_dump_file_is_a_usage_error(
    tmp_path: Path, invoke: Callable[..., Result]
) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(Payload(tmp_path / "ran"), protocol=2))
    result = invoke("logs", str(path))
    assert result.exit_code == USAGE and "refused" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "ran").exists()


def test_logs_of_one_dump_file_reports_its_pending_collective(
    tmp_path: Path, invoke: Callable[..., Result]
) -> None:
    (path,) = write_dumps(tmp_path, {3: [entry(1), entry(2, state="started", retired=False)]})
    result = invoke("logs", str(path), "--format", "json")
    assert result.exit_code == FINDINGS, result.output
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["code"] == "DDP302" and finding["evidence"]["seq"] == 2
