"""The DDP2xx-DDP4xx rules on recorded job reports (fixtures/jobs, made by
tests/record_job_fixtures.py) and on the GPU machines of fixtures/bandwidth (made by
tests/make_bandwidth_fixtures.py): each fires where expected and nowhere else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_doctor.judge import judge
from ddp_doctor.registry import all_rules
from ddp_doctor.report_io import report_from_json

FIXTURE_ROOT = Path(__file__).parent.parent / "fixtures"
FIXTURES = sorted((FIXTURE_ROOT / "jobs").glob("*.json")) + sorted(
    (FIXTURE_ROOT / "bandwidth").glob("*.json")
)
JOB_BLOCKS = ("DDP2", "DDP3", "DDP4")


def codes_for(path: Path) -> tuple[list[str], list[str]]:
    document = json.loads(path.read_text())
    report = report_from_json(document)
    found = [f.code for f in judge(report.probes) if f.code.startswith(JOB_BLOCKS)]
    return sorted(set(found)), sorted(document["expect"])


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_job_rules_fire_exactly_as_expected(path: Path) -> None:
    found, expected = codes_for(path)
    assert found == expected


def test_every_job_rule_fires_somewhere_and_is_silent_somewhere() -> None:
    outcomes = [codes_for(path)[0] for path in FIXTURES]
    # DDP206 and DDP304 come only from the job's output text, through the log patterns; codes
    # judged only in logs (DDP230-DDP235) never come from the job.
    text_only = {"DDP206", "DDP304", "DDP308"}
    for spec in all_rules():
        if spec.code.startswith(JOB_BLOCKS) and spec.code not in text_only and spec.judged != "log":
            assert any(spec.code in found for found in outcomes), spec.code
            assert any(spec.code not in found for found in outcomes), spec.code


def test_crash_evidence_names_rank_stage_and_signal() -> None:
    report = report_from_json(
        json.loads((FIXTURE_ROOT / "jobs" / "rank-sigkilled.json").read_text())
    )
    (finding,) = [f for f in judge(report.probes) if f.code == "DDP307"]
    assert finding.evidence == {
        "rank": 1,
        "stage": "ddp",
        "exit_code": -9,
        "error": None,
    }


def test_failed_job_output_goes_through_the_log_patterns() -> None:
    """The job's texts are read by the same table as `ddp-doctor logs` (DDP501 here), next to
    the job's own finding."""
    report = report_from_json(
        json.loads((FIXTURE_ROOT / "jobs" / "unused-parameters.json").read_text())
    )
    findings = {f.code: f for f in judge(report.probes)}
    assert findings["DDP307"].evidence["rank"] == 1
    assert findings["DDP501"].evidence["source"] == "job output"
