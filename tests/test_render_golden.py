"""Each renderer's output for one fixed report, compared with tests/golden/.

The report is built from a recorded setup (fixtures/facts/windows-laptop-1gpu.json: findings
at all three severities, a fix with a command), with its saved time and durations, so the
output does not depend on this machine. Run with UPDATE_GOLDEN=1 to rewrite the files after
an intended change, and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_doctor.judge import judge
from ddp_doctor.model import Report
from ddp_doctor.registry import Selector
from ddp_doctor.render import render
from ddp_doctor.render.table import render_table
from ddp_doctor.report_io import load_report

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
FIXTURE = HERE.parent / "fixtures" / "facts" / "windows-laptop-1gpu.json"
# Only the blocks this fixture is about, so rules added elsewhere do not move the golden files.
SELECT = ("DDP0", "DDP901", "DDP902", "DDP903", "DDP904")


def golden_report() -> Report:
    saved = load_report(FIXTURE)
    findings = judge(saved.probes, Selector.parse(SELECT))
    return Report(saved.tool_version, saved.created, saved.probes, tuple(findings))


@pytest.fixture(autouse=True)
def someone_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redaction reads the home folder and user name; make them ones the report never holds."""
    monkeypatch.setenv("HOME", "/home/golden-test-user")
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "golden-test-user")
    monkeypatch.delenv("NO_COLOR", raising=False)


RENDERERS = {
    "report.table.txt": lambda report: render_table(report, verbose=True, colour=False),
    "report.json": lambda report: render(report, "json"),
    "report.markdown.md": lambda report: render(report, "markdown"),
}


# A traced run that hung (a real run of fixtures/trace/hang_under_rank_guard.py, with this
# machine's folders replaced), for the trace's own tables in table and markdown.
TRACE_FIXTURE = HERE.parent / "fixtures" / "trace" / "reports" / "hang-under-rank-guard.json"
TRACE_RENDERERS = {
    "trace.table.txt": lambda report: render_table(report, verbose=True, colour=False),
    "trace.markdown.md": lambda report: render(report, "markdown"),
}


def golden_trace_report() -> Report:
    saved = load_report(TRACE_FIXTURE)
    return Report(saved.tool_version, saved.created, saved.probes, tuple(judge(saved.probes)))


# An attached job that hangs (a real `attach` of fixtures/attach/dataset_blocks.py under plain
# torchrun, recorded by tests/record_attach_fixtures.py), for attach's table and markdown.
ATTACH_FIXTURE = HERE.parent / "fixtures" / "attach" / "reports" / "dataset-blocks.json"
ATTACH_RENDERERS = {
    "attach.table.txt": lambda report: render_table(report, colour=False),
    "attach.markdown.md": lambda report: render(report, "markdown"),
}


def golden_attach_report() -> Report:
    saved = load_report(ATTACH_FIXTURE)
    return Report(saved.tool_version, saved.created, saved.probes, tuple(judge(saved.probes)))


@pytest.mark.parametrize(
    ("filename", "make"),
    [(name, golden_report) for name in sorted(RENDERERS)]
    + [(name, golden_trace_report) for name in sorted(TRACE_RENDERERS)]
    + [(name, golden_attach_report) for name in sorted(ATTACH_RENDERERS)],
)
def test_render_matches_golden(filename: str, make: object) -> None:
    renderer = {**RENDERERS, **TRACE_RENDERERS, **ATTACH_RENDERERS}[filename]
    text = renderer(make())  # type: ignore[operator]
    text = text if text.endswith("\n") else text + "\n"
    path = GOLDEN / filename
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"{filename} differs from the golden file; if the change is intended, "
        "rerun with UPDATE_GOLDEN=1 and review the diff"
    )


def test_the_golden_report_has_every_severity() -> None:
    assert {f.severity.word for f in golden_report().findings} == {"error", "warning", "info"}
