"""GPU-only mistakes from recorded journals (fixtures/trace/recorded, see its NOTE.md): the
journals are read as the doctor reads a live run's, judged, and every finding is compared with
the case's expected.txt (`CODE path:line`, or `CODE -` for one without a line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_doctor.facts.trace import TraceFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus, make_report
from ddp_doctor.probes.trace.journals import RankReader, journals_by_rank
from ddp_doctor.render import render
from ddp_doctor.report_io import load_report, report_from_json, report_to_json

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "trace" / "recorded"
CASES = sorted(p.name for p in RECORDED.iterdir() if p.is_dir())


def traced(folder: Path) -> TraceFacts:
    ranks = [
        RankReader(journals[-1], len(journals) - 1).trace(exit_code=None, stopped=False)
        for journals in journals_by_rank(folder).values()
    ]
    launcher = "python" if len(ranks) == 1 else "torchrun"
    return TraceFacts(command="torchrun train.py", launcher=launcher, ranks=tuple(ranks))


def findings_of(facts: TraceFacts) -> set[str]:
    results = [ProbeResult("trace", ProbeStatus.OK, facts, 1.0)]
    found = set()
    for finding in judge(results):
        where = f"{finding.location.path}:{finding.location.line}" if finding.location else "-"
        found.add(f"{finding.code} {where}")
    return found


@pytest.mark.parametrize("case", CASES)
def test_recorded_case(case: str) -> None:
    expected = set((RECORDED / case / "expected.txt").read_text().split("\n")) - {""}
    assert findings_of(traced(RECORDED / case)) == expected


def test_only_the_rank_with_the_wrong_output_device_is_named() -> None:
    results = [ProbeResult("trace", ProbeStatus.OK, traced(RECORDED / "ddp_output_device"), 1.0)]
    (finding,) = judge(results)
    assert finding.evidence["rank"] == 1 and finding.evidence["output_device"] == 0


def test_a_saved_trace_report_is_judged_again_the_same() -> None:
    results = [ProbeResult("trace", ProbeStatus.OK, traced(RECORDED / "shared_gpu"), 1.0)]
    report = make_report(results, judge(results))
    again = report_from_json(report_to_json(report))
    assert again.probes[0].facts == results[0].facts
    assert {f.code for f in judge(again.probes)} == {f.code for f in report.findings}
    for fmt in ("table", "markdown", "json"):
        assert "DDP305" in render(report, fmt)


HUNG = RECORDED.parent / "reports" / "hang-under-rank-guard.json"


def test_diagnose_of_a_saved_hang_finds_what_the_run_found_anywhere(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    invoke,  # type: ignore[no-untyped-def]
) -> None:
    """DDP120's static confirmation is in the saved facts (rank_guard_checks): judged again
    in a folder where the script does not exist, the report gives the run's findings."""
    document = json.loads(HUNG.read_text())
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(document))
    monkeypatch.chdir(tmp_path)
    result = invoke("diagnose", str(saved), "--format", "json")
    assert result.exit_code == 1, result.output
    again = json.loads(result.stdout)["findings"]
    assert [(f["code"], f["location"], f["evidence"]) for f in again] == [
        (f["code"], f["location"], f["evidence"]) for f in document["findings"]
    ]
    assert {f["code"] for f in again} == {"DDP120", "DDP302", "DDP304"}


def test_without_the_static_facts_the_runtime_hang_stands_alone(tmp_path: Path) -> None:
    """A trace saved before rank_guard_checks existed: DDP302 and DDP304 stay, DDP120 needs
    the static analysis the trace now records, and no rule reads the script to make up for it."""
    document = json.loads(HUNG.read_text())
    trace = next(p for p in document["probes"] if p["probe"] == "trace")
    del trace["facts"]["rank_guard_checks"]
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(document))
    assert {f.code for f in judge(load_report(saved).probes)} == {"DDP302", "DDP304"}
