"""Whose frame is it: a virtualenv inside the project folder is still torch's code, not the
user's, so a hang is named at the user's line (found by a run from a fresh clone with .venv)."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.patient.trace.sites import is_user_file, not_user_folders
from ddp_doctor.probes.trace.calls import site_of


def test_torch_in_a_venv_under_the_run_folder_is_not_the_users(tmp_path: Path) -> None:
    torch_dir = tmp_path / ".venv" / "lib" / "python3.11" / "site-packages" / "torch"
    folders = not_user_folders(str(torch_dir))
    torch_frame = site_of(
        [str(torch_dir / "distributed" / "distributed_c10d.py"), 3252, "f"], str(tmp_path)
    )
    user_frame = site_of([str(tmp_path / "train.py"), 15, "main"], str(tmp_path))
    assert torch_frame is not None and user_frame is not None
    assert not is_user_file(torch_frame.path, folders)
    assert is_user_file(user_frame.path, folders) and user_frame.path == "train.py"


def test_a_users_own_file_outside_the_run_folder_keeps_its_path(tmp_path: Path) -> None:
    site = site_of(["/opt/project/train.py", 7, "main"], str(tmp_path))
    assert site is not None and site.path == "/opt/project/train.py"
