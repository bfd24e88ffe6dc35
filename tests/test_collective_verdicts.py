"""One hang, one verdict: a real 2-rank gloo job (tests/hang_with_dumps.py) traced by `ddp-doctor
trace`, whose ranks also wrote their flight-recorder dumps while stuck. `trace`, `logs` on the
dumps and `diagnose` of the saved trace report name the same collective, with the flight
recorder's number for it (DDP's own collectives counted, which trace's wrappers never see), and
the same ranks waiting and missing; `diagnose` gives every finding the run gave. The fast tier
checks the same on a recorded run (fixtures/trace/reports/hang-with-dumps*), the slow tier on a
fresh one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from tracing import Traced, assert_nothing_left, trace

SCRIPT = Path(__file__).resolve().parent / "hang_with_dumps.py"
RECORDED = SCRIPT.parent.parent / "fixtures" / "trace" / "reports" / "hang-with-dumps.json"
RECORDED_DUMPS = RECORDED.with_suffix("")
TIMEOUT_S = 90
# Quiet long enough that a loaded machine's slow start (DDP's first wrap imports ~800 modules)
# is not taken for the hang.
HANG_AFTER_S = 10
# DDP's constructor (all_gather, two broadcasts) and backward (one all_reduce), the script's
# all_reduce: the collective under the rank guard is the sixth of the default group.
GUARDED_SEQ = 6


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> tuple[Traced, Path]:
    folder = tmp_path_factory.mktemp("hang_with_dumps")
    dumps = folder / "dumps"
    dumps.mkdir()
    command = ["torchrun", "--nproc-per-node", "2", str(SCRIPT), str(dumps)]
    traced = trace(folder, command, "--timeout", str(TIMEOUT_S), "--hang-after", str(HANG_AFTER_S))
    assert_nothing_left(folder)
    facts = traced.trace
    assert facts["outcome"] == "hang", (facts["outcome"], facts["ranks"], facts["output_tail"])
    return traced, dumps


def _one(findings: list[dict], code: str) -> dict:  # type: ignore[type-arg]
    (found,) = [f for f in findings if f["code"] == code]
    return found


def assert_one_verdict(traced: list[dict], trace_facts: dict, logged: list[dict]) -> None:  # type: ignore[type-arg]
    """`trace`'s findings and facts, and `logs`' findings on the same ranks' dumps, name one
    collective with one number, the same waiting ranks and the same missing rank."""
    traced_hang, logged_hang = _one(traced, "DDP302"), _one(logged, "DDP302")
    assert traced_hang["evidence"]["seq"] == logged_hang["evidence"]["seq"] == GUARDED_SEQ
    assert traced_hang["evidence"]["collective"] == logged_hang["evidence"]["op"] == "all_reduce"
    assert traced_hang["evidence"]["waiting_ranks"] == logged_hang["evidence"]["waiting_ranks"]
    assert traced_hang["evidence"]["waiting_ranks"] == [0]
    missing = [int(rank) for rank in traced_hang["evidence"]["ranks_elsewhere"]]
    assert missing == logged_hang["evidence"]["never_reached_ranks"] == [1]
    traced_mismatch, logged_mismatch = _one(traced, "DDP304"), _one(logged, "DDP304")
    assert traced_mismatch["evidence"]["seq"] == logged_mismatch["evidence"]["seq"] == GUARDED_SEQ
    # The table's "where the ranks were" numbers the pending calls the same way.
    pending = {s["rank"]: s["pending"] for s in trace_facts["forensics"]["ranks"]}
    assert {rank: (p["op"], p["seq"]) for rank, p in pending.items()} == {
        0: ("all_reduce", GUARDED_SEQ),
        1: ("barrier", GUARDED_SEQ),
    }


def _logs(invoke: Callable[..., Result], dumps: Path) -> list[dict]:  # type: ignore[type-arg]
    result = invoke("logs", str(dumps), "--format", "json")
    assert result.exit_code == 1, result.output
    return json.loads(result.stdout)["findings"]  # type: ignore[no-any-return]


def test_the_recorded_hang_gets_one_verdict_from_diagnose_and_logs(
    invoke: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast tier's copy of the real run below (tests/record_hang_with_dumps.py), judged
    again in a folder where the script does not exist."""
    monkeypatch.chdir(tmp_path)
    result = invoke("diagnose", str(RECORDED), "--format", "json")
    assert result.exit_code == 1, result.output
    diagnosed = json.loads(result.stdout)
    saved = json.loads(RECORDED.read_text())
    assert diagnosed["findings"] == saved["findings"]
    assert {f["code"] for f in diagnosed["findings"]} == {"DDP120", "DDP302", "DDP304"}
    trace_facts = next(p for p in saved["probes"] if p["probe"] == "trace")["facts"]
    assert_one_verdict(diagnosed["findings"], trace_facts, _logs(invoke, RECORDED_DUMPS))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_trace_and_logs_name_the_same_collective_number_and_ranks(
    hung: tuple[Traced, Path], invoke: Callable[..., Result]
) -> None:
    traced, dumps = hung
    assert sorted(p.name for p in dumps.iterdir()) == ["fr_trace_0", "fr_trace_1"]
    assert_one_verdict(traced.findings, traced.trace, _logs(invoke, dumps))


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
    assert json.loads(result.stdout)["findings"] == traced.document["findings"]  # all of them
