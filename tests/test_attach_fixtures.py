"""attach's recorded reports (fixtures/attach/reports, from real gloo jobs; see
tests/record_attach_fixtures.py) judged again: each must give exactly its expected codes of
attach's verdict, and render in every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_doctor.codec import from_jsonable, to_jsonable
from ddp_doctor.facts.attach import AttachFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import make_report
from ddp_doctor.render import render
from ddp_doctor.report_io import report_from_json

REPORTS = Path(__file__).resolve().parent.parent / "fixtures" / "attach" / "reports"
ATTACH_CODES = ("DDP302", "DDP304", "DDP307", "DDP7")
CASES = sorted(p.stem for p in REPORTS.glob("*.json"))


def _load(name: str) -> tuple[dict, list]:
    document = json.loads((REPORTS / f"{name}.json").read_text())
    return document, list(report_from_json(document).probes)


def test_every_case_is_recorded() -> None:
    assert set(CASES) >= {
        "dataset-blocks",
        "barrier-poll",
        "healthy",
        "straggler",
        "worker-stopped",
        "ptrace-refused",
    }


@pytest.mark.parametrize("name", CASES)
def test_recorded_case_gives_its_codes(name: str) -> None:
    document, probes = _load(name)
    codes = sorted(f.code for f in judge(probes) if f.code.startswith(ATTACH_CODES))
    assert codes == sorted(document["expect"])


@pytest.mark.parametrize("name", CASES)
def test_recorded_case_renders_in_every_format(name: str) -> None:
    _, probes = _load(name)
    report = make_report(probes, judge(probes))
    for fmt in ("table", "json", "markdown"):
        assert "attached: job" in render(report, fmt) or fmt == "json"
    assert json.loads(render(report, "json"))["probes"][0]["probe"] == "attach"


@pytest.mark.parametrize("name", CASES)
def test_attach_facts_round_trip(name: str) -> None:
    _, probes = _load(name)
    facts = probes[0].facts
    assert from_jsonable(AttachFacts, to_jsonable(facts)) == facts


def test_hang_names_the_missing_rank_and_its_line() -> None:
    _, probes = _load("dataset-blocks")
    hang = next(f for f in judge(probes) if f.code == "DDP302")
    assert hang.evidence["waiting"] == [0]
    assert "dataset_blocks.py" in hang.evidence["missing"]["rank 1"]
    assert hang.location is not None and hang.location.path.endswith("dataset_blocks.py")


def test_stacks_refused_still_gives_procs_view() -> None:
    _, probes = _load("ptrace-refused")
    blind = next(f for f in judge(probes) if f.code == "DDP701")
    assert blind.severity.name == "ERROR"  # no rank could be seen at all
    assert blind.evidence["users"] == ["nobody"]
    assert "sudo -u nobody ddp-doctor attach" in blind.fix.commands
    ranks = probes[0].facts.ranks
    assert all(s.cpu_s is not None and s.state for r in ranks for s in r.samples)
