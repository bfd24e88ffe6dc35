"""One way to build a finding (the registry's RuleSpec.finding), and every finding carries its
fix: the code's registered one unless the producer gives a more specific one."""

from __future__ import annotations

import ast
import pickle
from collections.abc import Iterable
from pathlib import Path

import pytest
from test_check_fixtures import CASES as SCRIPT_CASES
from test_check_fixtures import findings_for as script_findings

from ddp_doctor.codes import CODES
from ddp_doctor.flightrec.record import read_flight_record
from ddp_doctor.judge import judge
from ddp_doctor.logscan import scan_file
from ddp_doctor.model import Finding, Location, Remediation, Severity
from ddp_doctor.registry import Hit, spec_for
from ddp_doctor.report_io import load_report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
REPORT_FIXTURES = sorted(
    path for folder in ("facts", "jobs", "bandwidth") for path in (FIXTURES / folder).glob("*.json")
)
LOG_FIXTURES = sorted((FIXTURES / "logs").glob("*.log"))
SCRIPT_FIXTURES = sorted((FIXTURES / "scripts").glob("DDP1*.py"))
BUILDER = ROOT / "doctor" / "registry.py"


def assert_fixed(findings: Iterable[Finding]) -> None:
    for finding in findings:
        assert finding.fix is not None and finding.fix.text, finding.code
        assert finding.name == spec_for(finding.code).name


@pytest.mark.parametrize("code", [entry.code for entry in CODES])
def test_a_finding_built_for_any_code_carries_the_registered_fix(code: str) -> None:
    spec = spec_for(code)
    finding = spec.finding(Hit("something happened", {"key": 1}))
    assert finding.fix == spec.fix and finding.fix.text
    assert (finding.code, finding.name, finding.severity) == (code, spec.name, spec.severity)


def test_a_more_specific_fix_severity_and_location_win() -> None:
    fix = Remediation("do this instead", ("true",))
    hit = Hit("m", fix=fix, severity=Severity.INFO, location=Location("x.py", 3))
    finding = spec_for("DDP302").finding(hit)
    assert finding.fix == fix and finding.severity is Severity.INFO
    assert finding.location == Location("x.py", 3)


def _finding_constructions(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "Finding")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "Finding")
        )
    ]


def test_only_the_registry_constructs_findings() -> None:
    """Everything else goes through RuleSpec.finding, so no producer can drop the fix."""
    elsewhere = {
        str(path.relative_to(ROOT)): lines
        for folder in ("doctor", "probes", "patient")
        for path in (ROOT / folder).rglob("*.py")
        if path != BUILDER and (lines := _finding_constructions(path))
    }
    assert elsewhere == {}
    assert _finding_constructions(BUILDER)


@pytest.mark.parametrize("path", REPORT_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_recorded_reports_give_findings_with_fixes(path: Path) -> None:
    assert_fixed(judge(load_report(path).probes))


@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.stem)
def test_log_fixtures_give_findings_with_fixes(path: Path) -> None:
    assert_fixed(scan_file(str(path)))


def test_script_fixtures_give_findings_with_fixes() -> None:
    """Every case of every rule's fixture, as tests/test_check_fixtures.py splits them."""
    findings = [finding for case in SCRIPT_CASES for finding in script_findings(case)]
    assert {f.code for f in findings} >= {path.name[:6] for path in SCRIPT_FIXTURES}
    assert_fixed(findings)


def _entry(seq: int, op: str = "all_reduce", state: str = "completed") -> dict[str, object]:
    return {
        "collective_seq_id": seq,
        "profiling_name": f"nccl:{op}",
        "process_group": ["0", "default_pg"],
        "input_sizes": [[1024]],
        "input_dtypes": ["Float"],
        "state": state,
        "is_p2p": False,
    }


def test_flight_record_findings_carry_fixes_ddp511_included(tmp_path: Path) -> None:
    """DDP511 once had no fix at all, although one is registered."""
    full = [_entry(seq) for seq in range(1, 5)]
    paths = []
    for rank, entries in {0: full, 1: full[:2]}.items():
        path = tmp_path / f"nccl_trace_rank_{rank}"
        path.write_bytes(pickle.dumps({"version": "2.10", "entries": entries}, protocol=2))
        paths.append(path)
    broken = tmp_path / "nccl_trace_rank_2"
    broken.write_bytes(b"\x80\x02}q\x00(")  # a dump cut off while it was written
    record = read_flight_record([*paths, broken])
    assert {f.code for f in record.findings} == {"DDP302", "DDP511"}
    assert_fixed(record.findings)
    (unreadable,) = record.notes
    assert unreadable.fix == spec_for("DDP511").fix
