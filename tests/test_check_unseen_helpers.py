"""Helpers a program imports from modules the checked tree holds or not: a module of the
tree that imports torch (DDP110), a resume helper out of view handed the DDP wrapper
(DDP117), a set-up helper out of view that starts the group (DDP121), and a per-task
SLURM_LOCALID CUDA_VISIBLE_DEVICES (DDP127)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from click.testing import CliRunner

from ddp_doctor.cli import cli
from ddp_doctor.model import Severity
from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
ALL = CheckOptions(select=("ALL",))


def _found(project: str, code: str) -> list[tuple[str, int, Severity]]:
    outcome = check_paths([str(PROJECTS / project)], ALL)
    return sorted(
        (Path(f.location.path).name, f.location.line, f.severity)
        for f in outcome.findings
        if f.code == code
    )


def test_visible_devices_set_after_a_tree_module_that_imports_torch() -> None:
    assert _found("visible_devices_after_project_import", "DDP110") == [
        ("main.py", 12, Severity.INFO)
    ]


def test_visible_devices_set_after_a_tree_module_without_torch() -> None:
    assert _found("visible_devices_after_plain_project_import", "DDP110") == []


def test_group_started_by_a_helper_out_of_view_and_never_ended() -> None:
    assert _found("group_started_out_of_view", "DDP121") == [("train.py", 12, Severity.INFO)]


def test_group_started_out_of_view_ended_by_cleanup_or_a_library() -> None:
    assert _found("group_started_out_of_view_ended", "DDP121") == []


def test_helper_in_view_under_a_sys_path_hack_is_judged_at_its_own_init() -> None:
    """`import _init_paths` then `from utils.dist import init_distributed`: lib/utils/dist.py
    of the tree is the helper (CvT); the finding is its init line, not the entry point's call."""
    assert _found("group_helper_on_a_path_hack", "DDP121") == [("dist.py", 11, Severity.INFO)]


def test_helper_in_view_under_a_sys_path_hack_ended_by_its_cleanup() -> None:
    assert _found("group_helper_on_a_path_hack_ended", "DDP121") == []


def test_resume_through_a_helper_out_of_view_expects_the_prefix() -> None:
    assert _found("resume_through_unseen_helper", "DDP117") == []
    unwrapped = _found("resume_unwrapped_through_unseen_helper", "DDP117")
    assert unwrapped == [("train.py", 23, Severity.WARNING)]


def test_fix_ends_a_group_started_out_of_view_with_torch_distributed(tmp_path: Path) -> None:
    """The fix ends the group with torch.distributed's destroy, not `utils.destroy_...`."""
    script = tmp_path / "train.py"
    shutil.copy(PROJECTS / "group_started_out_of_view" / "train.py", script)
    CliRunner().invoke(cli, ["check", "--select", "ALL", "--fix", str(tmp_path)])
    after = script.read_text(encoding="utf-8")
    calls = [n for n in ast.walk(ast.parse(after)) if isinstance(n, ast.Call)]
    ends = [
        ast.unparse(c.func) for c in calls if ast.unparse(c.func).endswith("destroy_process_group")
    ]
    assert ends == ["torch.distributed.destroy_process_group"]
    assert _found_in(tmp_path, "DDP121") == []


def _found_in(folder: Path, code: str) -> list[int]:
    return [f.location.line for f in check_paths([str(folder)], ALL).findings if f.code == code]
