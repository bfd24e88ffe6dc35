"""The sweep's options (--sizes, --ops), nccl-tests' bus factors, and a collective the backend
lacks: recorded with its error while the others are measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddp_doctor.facts.job import RankFacts, StageRecord
from ddp_doctor.patient import bandwidth, worker
from ddp_doctor.patient.bandwidth import OPS, SizesError, bus_factor, parse_ops, parse_sizes
from ddp_doctor.probes.job.results import bandwidth_errors_of, rows_of


def test_sizes_as_nccl_tests_b_e_f() -> None:
    assert parse_sizes("1K:16K:4") == [1024, 4096, 16384]
    assert parse_sizes("1M:256M:4")[-1] == 256 * 1024**2
    for bad in ("1K:16K", "1K:16K:1", "8:4:2", "2:8:2", "x:1M:2"):
        with pytest.raises(SizesError):
            parse_sizes(bad)


def test_ops_accept_dashes_drop_repeats_and_refuse_unknown_names() -> None:
    assert parse_ops("all_reduce") == ("all_reduce",)
    assert parse_ops("all-gather, reduce_scatter,all_gather") == ("all_gather", "reduce_scatter")
    assert parse_ops(",".join(OPS)) == OPS
    for bad in ("", ",", "allreduce", "all_reduce,reduce"):
        with pytest.raises(SizesError):
            parse_ops(bad)


@pytest.mark.parametrize(
    ("op", "factor"),
    [
        ("all_reduce", 2 * 7 / 8),
        ("all_gather", 7 / 8),
        ("reduce_scatter", 7 / 8),
        ("all_to_all", 7 / 8),
        ("broadcast", 1.0),
    ],
)
def test_bus_factors_are_nccl_tests(op: str, factor: float) -> None:
    """nccl-tests doc/PERFORMANCE.md, for 8 ranks."""
    assert bus_factor(8, op) == pytest.approx(factor)


def test_a_collective_the_backend_lacks_is_recorded_not_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def sweep(torch: Any, device: Any, sizes: list[int], iters: int, op: str) -> list[dict]:
        if op == "all_to_all":
            raise RuntimeError("ProcessGroupGloo does not support alltoall")
        return [{"op": op, "size_bytes": 4, "count": 1, "dtype": "float", "time_us": 1.0,
                 "algbw_gbps": 0.1, "busbw_gbps": 0.1}]  # fmt: skip

    monkeypatch.setattr(bandwidth, "sweep", sweep)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    args = worker.parse_args(["--out", str(tmp_path), "--ops", "all_reduce,all_to_all"])
    data = worker.Worker(args).bandwidth()
    assert [row["op"] for row in data["rows"]] == ["all_reduce"]
    assert "does not support alltoall" in data["errors"]["all_to_all"]
    ranks = (RankFacts(0, (StageRecord("bandwidth", ended=True, ok=True, data=data),)),)
    assert [row.op for row in rows_of(ranks)] == ["all_reduce"]
    assert bandwidth_errors_of(ranks) == {"all_to_all": data["errors"]["all_to_all"]}
