"""DDP103 and the launch files that start a script: shell and SLURM scripts count, a README's
code block does not, and a file checked alone brings the scripts beside it that name it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_doctor.script.files import MAX_LAUNCH_SCRIPT_BYTES, launch_scripts_beside
from ddp_doctor.script.ignore import IgnoreRules
from ddp_doctor.script.runner import CheckOptions, check_paths
from ddp_doctor.script.shellvars import expand_variables

LAUNCH_FILES = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "launch_files"
SHELL = LAUNCH_FILES / "legacy_launch_in_shell_script"
README = LAUNCH_FILES / "legacy_launch_in_readme_only"


def _places(target: Path, code: str = "DDP103") -> set[tuple[str, int]]:
    outcome = check_paths([str(target)], CheckOptions(select=("ALL",)))
    return {
        (Path(f.location.path).name, f.location.line) for f in outcome.findings if f.code == code
    }


@pytest.mark.parametrize("target", [SHELL, SHELL / "main.py"], ids=["folder", "file alone"])
def test_a_shell_launcher_with_the_deprecated_module_makes_ddp103_fire(target: Path) -> None:
    assert _places(target) == {("main.py", 11)}


@pytest.mark.parametrize("target", [README, README / "main.py"], ids=["folder", "file alone"])
def test_a_readme_code_block_is_no_launch_file_for_ddp103(target: Path) -> None:
    assert _places(target) == set()
    assert _places(README, "DDP102") == {("README.md", 4)}  # the document is still reported


def test_the_scripts_beside_a_file_alone_are_read_not_reported() -> None:
    outcome = check_paths([str(SHELL / "main.py")], CheckOptions(select=("ALL",)))
    assert outcome.checked == 1
    assert {Path(f.location.path).name for f in outcome.findings} == {"main.py"}
    (finding,) = [f for f in outcome.findings if f.code == "DDP103"]
    assert Path(str(finding.evidence["launch_file"])).name == "dist_train.sh"


def test_only_small_scripts_that_name_the_file_come_along(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "run.sh").write_text("torchrun --nproc-per-node=2 train.py\n")
    (tmp_path / "other.sh").write_text("torchrun --nproc-per-node=2 eval.py\n")
    (tmp_path / "job.slurm").write_text("srun python train.py\n" + "#" * MAX_LAUNCH_SCRIPT_BYTES)
    (tmp_path / "notes.yaml").write_text("cmd: torchrun train.py\n")
    found = launch_scripts_beside([str(tmp_path / "train.py")], IgnoreRules.of([], str(tmp_path)))
    assert [Path(candidate.path).name for candidate, _ in found] == ["run.sh"]


def test_a_special_file_beside_is_skipped_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    os.mkfifo(tmp_path / "run.sh")  # reading it would block until a writer came
    (tmp_path / "dev.sh").symlink_to("/dev/zero")  # would never end
    found = launch_scripts_beside([str(tmp_path / "train.py")], IgnoreRules.of([], str(tmp_path)))
    assert found == []


def test_a_folder_is_read_once_for_all_the_files_named_in_it(tmp_path: Path) -> None:
    for name in ("train.py", "eval.py", "prep.py"):
        (tmp_path / name).write_text("print(1)\n")
    (tmp_path / "a.sh").write_text("torchrun train.py\ntorchrun eval.py\n")
    (tmp_path / "b.sh").write_text("torchrun eval.py\n")
    named = [str(tmp_path / name) for name in ("train.py", "eval.py", "prep.py")]
    found = launch_scripts_beside(named, IgnoreRules.of([], str(tmp_path)))
    assert [Path(candidate.path).name for candidate, _ in found] == ["a.sh", "b.sh"]


def test_a_scripts_folder_beside_a_file_alone_is_read_three_levels_down(tmp_path: Path) -> None:
    """VideoMAE's layout: scripts/<dataset>/<run>/pretrain.sh starts run_mae_pretraining.py."""
    (tmp_path / "train.py").write_text("print(1)\n")
    run = tmp_path / "scripts" / "ssv2" / "base_e800"
    run.mkdir(parents=True)
    (run / "pretrain.sh").write_text("python -m torch.distributed.launch train.py\n")
    too_deep = run / "one" / "more"
    too_deep.mkdir(parents=True)
    (too_deep / "deep.sh").write_text("torchrun train.py\n")
    (tmp_path / "scripts" / "link").symlink_to(run)  # a link is not followed
    found = launch_scripts_beside([str(tmp_path / "train.py")], IgnoreRules.of([], str(tmp_path)))
    assert [Path(candidate.path).name for candidate, _ in found] == ["pretrain.sh"]


def test_ddp103_fires_on_a_file_alone_started_from_a_scripts_folder(tmp_path: Path) -> None:
    for name in ("main.py", "dist.py"):  # dist.py reads LOCAL_RANK
        (tmp_path / name).write_text((SHELL / name).read_text())
    assert _places(tmp_path / "main.py") == set()
    run = tmp_path / "scripts" / "imagenet"
    run.mkdir(parents=True)
    (run / "train.sh").write_text("python -m torch.distributed.launch --nproc_per_node=8 main.py\n")
    assert _places(tmp_path / "main.py") == {("main.py", 11)}


THROUGH_VARIABLE = LAUNCH_FILES / "legacy_launch_through_variable"
UNKNOWN_VARIABLE = LAUNCH_FILES / "launch_through_unknown_variable"


@pytest.mark.parametrize(
    "target", [THROUGH_VARIABLE, THROUGH_VARIABLE / "main.py"], ids=["folder", "file alone"]
)
def test_a_launch_line_naming_the_script_through_a_shell_variable_counts(target: Path) -> None:
    """UniMatch's scripts/train.sh: `method='unimatch'` then `... launch ... $method.py`."""
    assert _places(target) == {("main.py", 13)}


@pytest.mark.parametrize(
    "target", [UNKNOWN_VARIABLE, UNKNOWN_VARIABLE / "main.py"], ids=["folder", "file alone"]
)
def test_a_variable_the_launch_file_does_not_assign_names_no_script(target: Path) -> None:
    assert _places(target) == set()


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["m='train'", "torchrun $m.py"], "torchrun train.py"),
        (['export M="train"', "torchrun ${M}.py"], "torchrun train.py"),
        (["m=train  # the script", "torchrun $m.py"], "torchrun train.py"),
        (["m=train", "m=eval", "torchrun $m.py"], "torchrun $m.py"),  # assigned twice
        (["m=$1", "torchrun $m.py"], "torchrun $m.py"),  # a positional argument
        (["m=$(basename $0)", "torchrun $m.py"], "torchrun $m.py"),  # a command's output
        (["torchrun $m.py"], "torchrun $m.py"),  # never assigned
    ],
)
def test_only_simple_literal_shell_variables_are_expanded(lines: list[str], expected: str) -> None:
    assert expand_variables("run.sh", lines)[-1] == expected


def test_makefile_variables_are_left_alone() -> None:
    lines = ["M=train", "run:\n\ttorchrun $M.py"]
    assert expand_variables("Makefile", lines) == lines
