"""A finding caused in a helper module the user did not name is reported on the entry point
that reaches it, with the call chain and the helper line as related location (issue 20,
item 2); in a folder run the helper reports it itself."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_doctor.cli import cli
from ddp_doctor.script.runner import CheckOptions, check_paths

TRAIN = """
    import os

    import torch
    import torch.distributed as dist

    from utils.ckpt import save_checkpoint


    def main():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        model = torch.nn.Linear(4, 4).cuda()
        for epoch in range(3):
            save_checkpoint(model, epoch)
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
"""
HELPER = """
    import torch


    def save_checkpoint(model, epoch):
        torch.save({"model": model.state_dict(), "epoch": epoch}, "last.pt")
"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "ckpt.py").write_text(textwrap.dedent(HELPER))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def places(*paths: str) -> set[tuple[str, int | None, str]]:
    outcome = check_paths(list(paths), CheckOptions(select=("DDP1",)))
    return {(f.location.path, f.location.line, f.code) for f in outcome.findings if f.location}


def test_helper_cause_reported_on_the_entry_point(tree: Path) -> None:
    outcome = check_paths(["train.py"], CheckOptions(select=("DDP116",)))
    (finding,) = outcome.findings
    assert (finding.location.path, finding.location.line) == ("train.py", 15)
    assert finding.evidence["related"] == [
        {"path": "utils/ckpt.py", "line": 6, "column": 5, "role": "cause"}
    ]
    assert finding.evidence["chain"] == ["train.py:15"]


def test_folder_run_reports_on_the_helper(tree: Path) -> None:
    found = {p for p in places(".") if p[2] == "DDP116"}
    assert found == {("utils/ckpt.py", 6, "DDP116")}


def test_sarif_names_the_helper_line_as_related(tree: Path) -> None:
    args = ["check", "--format", "sarif", "--select", "DDP116", "train.py"]
    document = json.loads(CliRunner().invoke(cli, args).stdout)
    (result,) = document["runs"][0]["results"]
    related = result["relatedLocations"][0]["physicalLocation"]
    assert related["artifactLocation"]["uri"] == "utils/ckpt.py"
    assert related["region"]["startLine"] == 6


def test_helper_not_reached_reports_nothing(tree: Path) -> None:
    (tree / "train.py").write_text(
        textwrap.dedent(TRAIN).replace("save_checkpoint(model, epoch)", "pass")
    )
    assert not {p for p in places("train.py") if p[2] == "DDP116"}


def test_fix_leaves_a_helper_finding_alone(tree: Path) -> None:
    before = (tree / "train.py").read_text()
    CliRunner().invoke(cli, ["check", "--fix", "--unsafe-fixes", "train.py"])
    assert (tree / "train.py").read_text() == before


@pytest.mark.parametrize("output", ["text", "json", "sarif"])
def test_another_files_path_is_spelled_as_the_user_gave_theirs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    """DDP104 names the file that parses --local_rank (read by absolute path as an import):
    shown relative, like the path the user gave, so no folder of the machine is printed."""
    project = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
    for name in ("train.py", "eval.py"):
        source = (project / "eval_entry_imports_train_parser" / name).read_text()
        (tmp_path / name).write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", "--format", output, "eval.py"])
    assert "DDP104" in result.stdout
    assert str(tmp_path) not in result.stdout
