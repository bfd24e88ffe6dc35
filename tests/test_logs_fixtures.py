"""Every log in fixtures/logs/ gives exactly the findings its .expected file lists, in order.

An .expected file has one line per finding, root cause first: the code, then facts the
finding's evidence must hold as key=value (values are JSON where they parse, else strings;
shell quoting for spaces). `severity=` checks the finding's severity. Lines starting with `#`
are comments.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ddp_doctor.logscan import scan_file
from ddp_doctor.model import Finding

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
LOGS = sorted(FIXTURES.glob("*.log"))


def expected_findings(path: Path) -> list[tuple[str, dict[str, object]]]:
    expected = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        code, *pairs = shlex.split(line)
        facts = dict(pair.split("=", 1) for pair in pairs)
        expected.append((code, {key: _value(text) for key, text in facts.items()}))
    return expected


def _value(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _fact(finding: Finding, key: str) -> object:
    return finding.severity.word if key == "severity" else finding.evidence.get(key)


def test_there_are_fixtures() -> None:
    assert len(LOGS) >= 30


@pytest.mark.parametrize("log", LOGS, ids=[path.stem for path in LOGS])
def test_fixture_gives_its_expected_findings(log: Path) -> None:
    sidecar = log.with_suffix(".expected")
    assert sidecar.exists(), f"{log.name} has no {sidecar.name}"
    expected = expected_findings(sidecar)
    findings = scan_file(str(log))

    assert [f.code for f in findings] == [code for code, _ in expected]
    for finding, (code, facts) in zip(findings, expected, strict=True):
        actual = {key: _fact(finding, key) for key in facts}
        assert actual == facts, f"{code} in {log.name}"
        assert finding.evidence["text"], f"{code} in {log.name} has no evidence text"
        assert finding.location is not None and finding.location.line == finding.evidence["line"]
