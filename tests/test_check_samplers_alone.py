"""A helper module's loader factory checked alone (DDP113): the loop over its loader and the
set_epoch belong to the caller. With an importer in view (importers.py) it is judged as in its
folder; with none in view it is not judged (measured on the github corpus: judging it found
HigherHRNet's miss and brought three false alarms, Swin's build.py among them, whose caller
calls set_epoch out of view)."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
UNSET = PROJECTS / "loader_factory_no_set_epoch"
SET = PROJECTS / "loader_factory_set_epoch"


def _codes(target: Path) -> list[tuple[str, int, str]]:
    findings = check_paths([str(target)], CheckOptions(select=("ALL",))).findings
    return [(Path(f.location.path).name, f.location.line or 0, f.code) for f in findings]


def test_a_loader_factory_is_judged_with_the_importer_in_view() -> None:
    assert _codes(UNSET) == [("build.py", 11, "DDP113")]
    assert _codes(UNSET / "data" / "build.py") == [("build.py", 11, "DDP113")]
    assert _codes(SET) == []
    assert _codes(SET / "data" / "build.py") == []


def test_a_loader_factory_alone_with_no_importer_in_view_is_not_judged(tmp_path: Path) -> None:
    lone = tmp_path / "build.py"
    lone.write_text((UNSET / "data" / "build.py").read_text(encoding="utf-8"), encoding="utf-8")
    assert "DDP113" not in {code for _, _, code in _codes(lone)}
