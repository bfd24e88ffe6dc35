"""`check --fix`, `--diff` and `--unsafe-fixes` (issue 20, item 5): every fix leaves a file that
parses, removes its finding, keeps comments and formatting outside the edit, and a second
--fix changes nothing."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ddp_doctor.cli import cli

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "fix"


def check(*args: str) -> Result:
    return CliRunner().invoke(cli, ["check", "--select", "ALL", *args], catch_exceptions=False)


def codes(path: Path) -> set[str]:
    return {f["code"] for f in json.loads(check("--format", "json", str(path)).stdout)["findings"]}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES, tmp_path / "fix")
    return tmp_path / "fix"


def comments(text: str) -> list[str]:
    return [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]


def test_fix_local_rank_load_and_destroy(work: Path) -> None:
    script = work / "local_rank_load_destroy.py"
    before = script.read_text(encoding="utf-8")
    assert {"DDP103", "DDP104", "DDP118", "DDP121"} <= codes(script)
    check("--fix", str(script))
    after = script.read_text(encoding="utf-8")
    ast.parse(after)
    assert not {"DDP103", "DDP104", "DDP118", "DDP121"} & codes(script)
    assert comments(after) == comments(before)
    check("--fix", str(script))
    assert script.read_text(encoding="utf-8") == after


def test_unsafe_fixes_need_the_flag(work: Path) -> None:
    script = work / "unsafe_save_set_epoch.py"
    before = script.read_text(encoding="utf-8")
    check("--fix", str(script))
    assert script.read_text(encoding="utf-8") == before
    check("--fix", "--unsafe-fixes", str(script))
    after = script.read_text(encoding="utf-8")
    ast.parse(after)
    assert not {"DDP113", "DDP116"} & codes(script)
    assert comments(after) == comments(before)
    check("--fix", "--unsafe-fixes", str(script))
    assert script.read_text(encoding="utf-8") == after


def test_fix_wrapper_state_dict(work: Path) -> None:
    script = work / "wrapper_state_dict.py"
    check("--fix", str(script))
    assert "DDP117" not in codes(script)
    assert "model.module.state_dict()" in script.read_text(encoding="utf-8")


def test_fix_launch_script(work: Path) -> None:
    launch = work / "launch.sh"
    check("--fix", str(launch))
    text = launch.read_text(encoding="utf-8")
    assert "DDP102" not in codes(launch)
    assert text.startswith("#!/bin/bash\n# start 8 ranks\n") and "--use_env" not in text


def test_diff_changes_nothing_and_exits_1(work: Path) -> None:
    before = {p.name: p.read_bytes() for p in work.iterdir()}
    result = check("--diff", str(work))
    assert result.exit_code == 1
    assert "+    dist.destroy_process_group()" in result.stdout
    assert {p.name: p.read_bytes() for p in work.iterdir()} == before
    check("--fix", "--unsafe-fixes", str(work))
    assert check("--diff", "--unsafe-fixes", str(work)).exit_code == 0


def test_notebook_is_never_rewritten(tmp_path: Path) -> None:
    notebooks = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "notebooks"
    shutil.copytree(notebooks, tmp_path / "nb")
    before = (tmp_path / "nb" / "set_epoch_missing.ipynb").read_bytes()
    check("--fix", "--unsafe-fixes", str(tmp_path / "nb"))
    assert (tmp_path / "nb" / "set_epoch_missing.ipynb").read_bytes() == before


def test_plain_check_does_not_import_libcst() -> None:
    probe = (
        "import sys\nfrom ddp_doctor.cli import main\n"
        "try:\n    main(['check', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "print('libcst' in sys.modules)\n"
    )
    script = str(FIXTURES / "wrapper_state_dict.py")
    done = subprocess.run(
        [sys.executable, "-c", probe, script], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "False"


def apply_sarif(text: str, replacements: list[dict]) -> str:
    """Apply SARIF whole-line replacements (as this tool writes them), last first."""
    lines = text.splitlines(keepends=True)
    for change in sorted(replacements, key=lambda r: -r["deletedRegion"]["startLine"]):
        region = change["deletedRegion"]
        start, end = region["startLine"] - 1, region["endLine"] - 1
        lines[start:end] = [change["insertedContent"]["text"]]
    return "".join(lines)


def test_sarif_carries_the_fix_that_fix_applies(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(work)
    document = json.loads(check("--format", "sarif", "local_rank_load_destroy.py").stdout)
    results = document["runs"][0]["results"]
    fixed = {r["ruleId"] for r in results if r.get("fixes")}
    assert {"DDP103", "DDP104", "DDP118", "DDP121"} <= fixed
    text = Path("local_rank_load_destroy.py").read_text(encoding="utf-8")
    load = next(r for r in results if r["ruleId"] == "DDP118")
    change = load["fixes"][0]["artifactChanges"][0]
    assert change["artifactLocation"]["uri"] == "local_rank_load_destroy.py"
    patched = apply_sarif(text, change["replacements"])
    ast.parse(patched)
    assert 'torch.load("init.pt", map_location="cpu")' in patched
    assert len(patched.splitlines()) == len(text.splitlines())
