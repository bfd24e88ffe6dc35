"""One hang, one verdict: a real 2-rank gloo job (tests/hang_with_dumps.py) traced by `ddp-doctor
trace`, whose ranks also wrote their flight-recorder dumps while stuck. `trace`, `logs` on the
dumps and `diagnose` of the saved trace report name the same collective, with the flight
recorder's number for it (DDP's own collectives counted, which trace's wrappers never see), and
the same ranks waiting and missing; `diagnose` gives every finding the run gave."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from tracing import Traced, assert_nothing_left, trace

SCRIPT = Path(__file__).resolve().parent / "hang_with_dumps.py"
TIMEOUT_S = 90
# DDP's constructor (all_gather, two broadcasts) and backward (one all_reduce), the script's
# all_reduce: the collective under the rank guard is the sixth of the default group.
GUARDED_SEQ = 6


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> tuple[Traced, Path]:
    folder = tmp_path_factory.mktemp("hang_with_dumps")
    dumps = folder / "dumps"
    dumps.mkdir()
    command = ["torchrun", "--nproc-per-node", "2", str(SCRIPT), str(dumps)]
    traced = trace(folder, command, "--timeout", str(TIMEOUT_S), "--hang-after", "3")
    assert_nothing_left(folder)
    facts = traced.trace
    assert facts["outcome"] == "hang", (facts["outcome"], facts["ranks"], facts["output_tail"])
    return traced, dumps


def _one(findings: list[dict], code: str) -> dict:  # type: ignore[type-arg]
    (found,) = [f for f in findings if f["code"] == code]
    return found


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_trace_and_logs_name_the_same_collective_number_and_ranks(
    hung: tuple[Traced, Path], invoke: Callable[..., Result]
) -> None:
    traced, dumps = hung
    assert sorted(p.name for p in dumps.iterdir()) == ["fr_trace_0", "fr_trace_1"]
    result = invoke("logs", str(dumps), "--format", "json")
    assert result.exit_code == 1, result.output
    logged = json.loads(result.stdout)["findings"]

    traced_hang, logged_hang = _one(traced.findings, "DDP302"), _one(logged, "DDP302")
    assert traced_hang["evidence"]["seq"] == logged_hang["evidence"]["seq"] == GUARDED_SEQ
    assert traced_hang["evidence"]["collective"] == logged_hang["evidence"]["op"] == "all_reduce"
    assert traced_hang["evidence"]["waiting_ranks"] == logged_hang["evidence"]["waiting_ranks"]
    assert traced_hang["evidence"]["waiting_ranks"] == [0]
    missing = [int(rank) for rank in traced_hang["evidence"]["ranks_elsewhere"]]
    assert missing == logged_hang["evidence"]["never_reached_ranks"] == [1]

    traced_mismatch, logged_mismatch = _one(traced.findings, "DDP304"), _one(logged, "DDP304")
    assert traced_mismatch["evidence"]["seq"] == logged_mismatch["evidence"]["seq"] == GUARDED_SEQ

    # The table's "where the ranks were" numbers the pending calls the same way.
    pending = {s["rank"]: s["pending"] for s in traced.trace["forensics"]["ranks"]}
    assert {rank: (p["op"], p["seq"]) for rank, p in pending.items()} == {
        0: ("all_reduce", GUARDED_SEQ),
        1: ("barrier", GUARDED_SEQ),
    }


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_diagnose_of_the_saved_trace_report_finds_what_the_run_found(
    hung: tuple[Traced, Path], invoke: Callable[..., Result], tmp_path: Path
) -> None:
    traced, _ = hung
    assert {"DDP120", "DDP302", "DDP304"} <= traced.codes
    (check,) = traced.trace["rank_guard_checks"]
    assert Path(check["path"]).name == SCRIPT.name and check["error"] is None
    saved = tmp_path / "trace.json"
    saved.write_text(json.dumps(traced.document))
    result = invoke("diagnose", str(saved), "--format", "json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["findings"] == traced.findings
