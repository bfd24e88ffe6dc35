"""CLI conventions: -h everywhere, help texts true per command, one word per format, counts
pluralised, `explain` printing each part once, [tool.ddp-doctor] defaults for every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_doctor.cli import COMMANDS
from ddp_doctor.codes import CODES
from ddp_doctor.commands.explain import explain_text
from ddp_doctor.exitcodes import USAGE
from ddp_doctor.model import Finding, Severity
from ddp_doctor.registry import lookup
from ddp_doctor.render.text import summary

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "fixtures" / "scripts" / "DDP101_data_parallel_used.py"


@pytest.mark.parametrize("words", [[], *([name] for name in sorted(COMMANDS))])
def test_dash_h_is_help_everywhere(invoke, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = invoke(*words, "-h")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: ")
    assert result.stdout == invoke(*words, "--help").stdout


def test_check_offers_host_redaction_only_where_it_has_it(invoke) -> None:  # type: ignore[no-untyped-def]
    check_help = " ".join(invoke("check", "-h").stdout.split())
    run_help = " ".join(invoke("run", "-h").stdout.split())
    assert "markdown" not in check_help.split("--redact-hosts")[1].split("--")[0]
    assert "json and markdown output" in run_help


def test_info_is_never_pluralised() -> None:
    infos = [Finding("DDP101", "x", Severity.INFO, "m")] * 19
    warnings = [Finding("DDP102", "y", Severity.WARNING, "m")] * 2
    text = summary([*infos, *warnings], 3)
    assert "19 info" in text and "infos" not in text and "2 warnings" in text


def test_check_table_is_a_table_with_a_header_and_a_row_per_finding(invoke) -> None:  # type: ignore[no-untyped-def]
    result = invoke("check", str(SCRIPT), "--format", "table")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["where", "severity", "code", "name", "message"]
    document = json.loads(invoke("check", str(SCRIPT), "--format", "json").stdout)
    rows = [line for line in lines[1:] if line.startswith(str(SCRIPT))]
    assert len(rows) == len(document["findings"]) > 0


@pytest.mark.parametrize("spec", [lookup(code.code) for code in CODES], ids=lambda s: s.code)
def test_explain_prints_each_part_once(spec) -> None:  # type: ignore[no-untyped-def]
    text = explain_text(spec)
    for part in ("What it finds:", "Why it matters:", "Fix:"):
        assert text.count(part) == 1, (spec.code, part)


def pyproject(folder: Path, table: str) -> None:
    (folder / "pyproject.toml").write_text(f"[tool.ddp-doctor]\n{table}\n")


def test_fail_on_and_format_come_from_pyproject(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    pyproject(tmp_path, 'fail-on = "info"\nformat = "json"')
    monkeypatch.chdir(tmp_path)
    result = invoke("check", str(SCRIPT))  # DDP101 is an info: fails only with fail-on info
    assert result.exit_code == 1 and json.loads(result.stdout)["findings"]
    cli_wins = invoke("check", str(SCRIPT), "--fail-on", "error", "--format", "text")
    assert cli_wins.exit_code == 0 and not cli_wins.stdout.startswith("{")


def test_select_and_ignore_from_pyproject_reach_every_command(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: Distributed package doesn't have NCCL built in\n")
    monkeypatch.chdir(tmp_path)
    found = {
        f["code"]
        for f in json.loads(invoke("logs", str(log), "--format", "json").stdout)["findings"]
    }
    assert found
    pyproject(tmp_path, f"ignore = {sorted(found)!r}".replace("'", '"'))
    kept = json.loads(invoke("logs", str(log), "--format", "json").stdout)["findings"]
    assert kept == []


@pytest.mark.parametrize("table", ['fail-on = "sometimes"', "format = 3", 'colour = "always"'])
def test_a_bad_pyproject_value_is_one_line_and_exit_2(
    invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str
) -> None:  # type: ignore[no-untyped-def]
    pyproject(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    result = invoke("logs", str(SCRIPT))
    assert result.exit_code == USAGE
    assert "pyproject.toml" in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_run_takes_a_virtualenv_folder_as_python(invoke, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """`--python .venv`, as uv accepts it: the folder's own interpreter is examined."""
    import sys

    venv = Path(sys.prefix)
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests do not run in a virtualenv")
    monkeypatch.chdir(venv.parent)
    result = invoke("run", "--no-jobs", "--python", venv.name, "--format", "json", "--no-redact")
    document = json.loads(result.stdout)
    python = next(p for p in document["probes"] if p["probe"] == "python")
    assert python["status"] == "ok", python
    assert Path(python["facts"]["executable"]).parent.parent == venv
    assert "DDP012" not in {f["code"] for f in document["findings"]}
