"""The GitHub action's step script (action/run.sh) with GitHub's files faked: what it writes
for code scanning and the job summary, and the exit code it hands to the last step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "action" / "run.sh"
FIXTURES = ROOT / "fixtures"


def run_action(tmp_path: Path, command: str, fail_on: str = "error") -> dict[str, str]:
    outputs, summary = tmp_path / "outputs", tmp_path / "summary.md"
    doctor_bin = Path(sys.executable).parent
    if not (doctor_bin / "ddp-doctor").exists():
        pytest.skip("no ddp-doctor script beside this Python")
    env = {
        **os.environ,
        "PATH": f"{doctor_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "DDP_DOCTOR_COMMAND": command,
        "DDP_DOCTOR_FAIL_ON": fail_on,
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    values["stdout"] = done.stdout
    return values


def test_check_writes_sarif_and_annotations(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "scripts" / "DDP113_set_epoch_missing.py", script)
    values = run_action(tmp_path, "check train.py")
    assert values["exit-code"] == "1"
    sarif = json.loads((tmp_path / values["sarif-file"]).read_text())
    rules = {r["ruleId"] for run in sarif["runs"] for r in run["results"]}
    assert "DDP113" in rules
    assert "::error" in values["stdout"] and "DDP113" in values["stdout"]


def test_fail_on_is_passed_through(tmp_path: Path) -> None:
    clean = tmp_path / "ok.py"
    clean.write_text("print('no distributed code here')\n")
    assert run_action(tmp_path, "check ok.py", "info")["exit-code"] == "0"


def test_logs_writes_the_markdown_report_to_the_summary(tmp_path: Path) -> None:
    log = FIXTURES / "logs" / "busy_gpus.log"
    values = run_action(tmp_path, f"logs {log}")
    assert values["exit-code"] == "1"
    assert "DDP024" in (tmp_path / "summary.md").read_text()


def test_an_unknown_command_is_exit_code_2(tmp_path: Path) -> None:
    assert run_action(tmp_path, "explain DDP113")["exit-code"] == "2"
