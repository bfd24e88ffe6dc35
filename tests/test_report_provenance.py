"""Reports a maintainer can trust: `diagnose` keeps who ran what and when and adds who judged
again; a job cut at --timeout is timed-out in every format; evidence rounded for people and
exact in JSON; the Markdown report names what it left out."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ddp_doctor import __version__
from ddp_doctor.engine import Probe, run_probe
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.judge import judge
from ddp_doctor.model import Finding, ProbeStatus, Report, Severity
from ddp_doctor.render import render
from ddp_doctor.render.facts_text import evidence_line, rounded
from ddp_doctor.render.markdown import render_markdown
from ddp_doctor.report_io import load_report, report_to_json

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"
SAVED_COMMAND = "ddp-doctor run --timeout 1.5 --format json"
SAVED_DATE = "2025-01-02T03:04:05+00:00"


def saved_report(tmp_path: Path, timed_out: bool = False) -> Path:
    """The healthy recording with a command and date of its own, optionally cut at --timeout
    (as an older ddp-doctor saved it: status ok, timed_out true)."""
    document = json.loads(HEALTHY.read_text(encoding="utf-8"))
    document.update(command=SAVED_COMMAND, created=SAVED_DATE, tool_version="0.0.9")
    for probe in document["probes"]:
        if probe["probe"] == "job" and timed_out:
            probe["status"] = "ok"
            probe["facts"]["timed_out"] = True
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_diagnose_keeps_the_saved_command_date_and_version(
    invoke, tmp_path: Path, fmt: str
) -> None:  # type: ignore[no-untyped-def]
    result = invoke("diagnose", str(saved_report(tmp_path)), "--format", fmt)
    assert result.exit_code in (0, 1), result.output
    assert SAVED_COMMAND in result.stdout and SAVED_DATE in result.stdout
    assert "0.0.9" in result.stdout
    if fmt == "json":
        document = json.loads(result.stdout)
        assert document["command"] == SAVED_COMMAND and document["created"] == SAVED_DATE
        assert document["rejudged"]["tool_version"] != "0.0.9"
        assert document["rejudged"]["created"] > SAVED_DATE
    else:
        assert "re-judged by" in result.stdout and f"ddp-doctor {__version__} on" in result.stdout


def test_a_rejudged_report_round_trips_and_keeps_the_first_command(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    once = invoke("diagnose", str(saved_report(tmp_path)), "--format", "json")
    again_path = tmp_path / "again.json"
    again_path.write_text(once.stdout, encoding="utf-8")
    loaded = load_report(again_path)
    assert loaded.command == SAVED_COMMAND and loaded.rejudged is not None
    twice = json.loads(invoke("diagnose", str(again_path), "--format", "json").stdout)
    assert twice["command"] == SAVED_COMMAND and twice["created"] == SAVED_DATE


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_a_job_cut_at_the_timeout_is_timed_out_in_every_format(
    invoke, tmp_path: Path, fmt: str
) -> None:  # type: ignore[no-untyped-def]
    result = invoke("diagnose", str(saved_report(tmp_path, timed_out=True)), "--format", fmt)
    if fmt == "json":
        status = {p["probe"]: p["status"] for p in json.loads(result.stdout)["probes"]}
        assert status["job"] == "timed-out"
    else:
        job_rows = [
            line for line in result.stdout.splitlines() if line.lstrip("| ").startswith("job")
        ]
        assert any("timed-out" in line for line in job_rows), result.stdout
        assert not any(line.split()[:2] == ["job", "ok"] for line in job_rows)


def test_the_engine_marks_facts_cut_by_their_limit_timed_out_and_keeps_them() -> None:
    saved = load_report(HEALTHY)
    job = next(r for r in saved.probes if r.probe == "job")
    cut = dataclasses.replace(job.facts, timed_out=True)
    result = run_probe(Probe("job", lambda: cut, 5.0))
    assert result.status is ProbeStatus.TIMED_OUT and result.facts is cut
    assert run_probe(Probe("job", lambda: job.facts, 5.0)).status is ProbeStatus.OK


def test_a_job_timed_out_with_its_facts_is_not_a_slow_machine() -> None:
    """DDP902 is for a probe that never answered; a job cut at --timeout has DDP906."""
    saved = load_report(HEALTHY)
    probes = tuple(
        dataclasses.replace(r, status=ProbeStatus.TIMED_OUT) if r.probe == "job" else r
        for r in saved.probes
    )
    assert "DDP902" not in {f.code for f in judge(probes)}


def test_evidence_is_rounded_for_people_and_exact_in_json() -> None:
    exact = 1.4477046320000682
    finding = Finding(
        "DDP906",
        "job-cut-by-timeout",
        Severity.ERROR,
        "cut",
        evidence={"job_timeout_s": exact, "small": 0.000123456, "sizes": [2.5, 1e9 / 3]},
    )
    report = Report("0", SAVED_DATE, (), (finding,))
    assert "job_timeout_s=1.45" in evidence_line(finding.evidence)
    assert rounded(0.000123456) == 0.000123 and rounded([1e9 / 3]) == [333333333.3]
    assert str(exact) not in render(report, "table") and str(exact) not in render(
        report, "markdown"
    )
    assert json.loads(render(report, "json"))["findings"][0]["evidence"]["job_timeout_s"] == exact


def test_markdown_names_what_it_left_out_for_length() -> None:
    saved = load_report(ROOT / "fixtures" / "facts" / "windows-laptop-1gpu.json")
    document = report_to_json(Report(saved.tool_version, saved.created, saved.probes, ()))
    text = render_markdown(json.loads(json.dumps(document)))
    shown = text.count("<summary>")
    sections = [p["probe"] for p in document["probes"] if p.get("facts")]
    assert shown < len(sections)  # this report is too short to fold every section
    note = next(line for line in text.splitlines() if line.startswith("Left out for length"))
    missing = [name for name in ("torch", "plan") if f"<summary>{name} facts" not in text]
    assert missing and all(f"{name} facts" in note for name in missing)
    assert FactSet.of(saved.probes).torch is not None


@pytest.mark.slow
def test_run_with_a_short_timeout_shows_the_job_timed_out(invoke) -> None:  # type: ignore[no-untyped-def]
    """The issue's acceptance: `run --timeout 1.5` is timed-out, not `job ok`."""
    result = invoke("run", "--timeout", "1.5", "--format", "json")
    document = json.loads(result.stdout)
    job = next(p for p in document["probes"] if p["probe"] == "job")
    assert job["facts"]["timed_out"] and job["status"] == "timed-out"
    assert "DDP906" in {f["code"] for f in document["findings"]} and result.exit_code == 1
    table = invoke("run", "--timeout", "1.5").stdout
    assert any(line.split()[:2] == ["job", "timed-out"] for line in table.splitlines())
