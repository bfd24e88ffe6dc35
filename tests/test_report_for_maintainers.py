"""What a maintainer gets from a pasted report: the command line and versions first, every
finding with its evidence, the job's tables once (never its raw JSON), at most a fifth of the
report in folded facts, and `logs` saying what it read when it found nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddp_doctor.judge import judge
from ddp_doctor.model import Report
from ddp_doctor.render import render
from ddp_doctor.report_io import load_report

ROOT = Path(__file__).resolve().parent.parent
RECORDED = sorted((ROOT / "fixtures" / "jobs").glob("*.json")) + sorted(
    (ROOT / "fixtures" / "facts").glob("*.json")
)
FOLDED = re.compile(r"<details>.*?</details>\n", re.S)


def judged(path: Path) -> Report:
    saved = load_report(path)
    return Report(
        saved.tool_version,
        saved.created,
        saved.probes,
        tuple(judge(saved.probes)),
        command="ddp-doctor run --format markdown",
    )


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_markdown_folds_at_most_a_fifth_and_never_the_raw_job(path: Path) -> None:
    report = judged(path)
    text = render(report, "markdown")
    folded = sum(len(block) for block in FOLDED.findall(text))
    assert folded <= 0.2 * len(text)
    assert '"ranks"' not in text and '"identities"' not in text
    assert text.startswith("## ddp-doctor report")
    assert "`ddp-doctor run --format markdown`" in text.split("### ")[0]
    job = report.probe("job")
    if job is not None and job.facts is not None and job.facts.launched:
        assert text.count("### Job") == 1


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_every_finding_shows_its_evidence(path: Path) -> None:
    report = judged(path)
    table = render(report, "table")
    markdown = render(report, "markdown")
    for finding in report.findings:
        text = finding.evidence.get("text")
        if text:
            assert str(text)[:40] in table
            assert str(text)[:40].replace("|", "\\|") in markdown


def test_header_names_python_torch_and_system() -> None:
    report = judged(ROOT / "fixtures" / "facts" / "python-too-old.json")
    header = render(report, "markdown").split("**")[0]
    assert "3.7.17" in header and "python3 on PATH" in header
    assert "glibc 2.27" in header and "Ubuntu 18.04.6 LTS" in header


def test_verbose_table_shows_the_python_and_torch_paths() -> None:
    from ddp_doctor.render.table import render_table

    report = judged(ROOT / "fixtures" / "facts" / "venv-without-torch.json")
    text = render_table(report, verbose=True, colour=False)
    assert "/home/ana/proj/.venv/bin/python" in text and "VIRTUAL_ENV is set" in text


def test_a_job_not_launched_is_never_ok() -> None:
    for path in RECORDED:
        for result in load_report(path).probes:
            if result.probe == "job" and result.facts is not None and not result.facts.launched:
                assert result.status.value in ("failed", "skipped"), path.name


def test_logs_with_nothing_known_says_what_it_read(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("logs", "--format", "json", "-", input="epoch 1 loss 0.5\nepoch 2\n")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["findings"] == [] and document["subject"] == "2 lines of stdin"
    table = invoke("logs", "-", input="epoch 1 loss 0.5\nepoch 2\n")
    assert "No problems found" not in table.stdout and "2 lines of stdin" in table.stdout
