"""DDP116 on a helper module's save that nothing in view calls: left to its callers in a
tree with an entry point, judged as an API when the helper is checked alone."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"


def _codes(path: Path) -> list[tuple[str, int, str]]:
    outcome = check_paths([str(path)], CheckOptions(select=("ALL",)))
    return [(Path(f.location.path).name, f.location.line, f.code) for f in outcome.findings]


def test_uncalled_save_helper_beside_an_entry_point_is_left_to_its_callers() -> None:
    assert _codes(PROJECTS / "save_helper_called_out_of_view") == []


def test_the_same_helper_checked_alone_is_an_api() -> None:
    helper = PROJECTS / "save_helper_called_out_of_view" / "utils" / "checkpoint.py"
    assert _codes(helper) == [("checkpoint.py", 10, "DDP116")]


def test_the_same_helper_called_unguarded_fires() -> None:
    assert ("checkpoint.py", 10, "DDP116") in _codes(PROJECTS / "save_helper_called_unguarded")
