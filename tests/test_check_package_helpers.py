"""A package's helper module named on its own, whose entry points sit beside the package
(facebookresearch/SlowFast: tools/train_net.py imports `slowfast.utils.distributed`, whose
init_process_group helper nothing calls; the group is started by utils/multiprocessing.py).
Checked alone, the helper is judged as in the folder check: importers.py finds the entry points
from the folder the full dotted import resolves from, and the group starters beside it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ddp_doctor.script.ignore import IgnoreRules
from ddp_doctor.script.importers import group_starters_beside, importers_of
from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
UNUSED = PROJECTS / "packaged_init_helper_unused"
CALLED = PROJECTS / "packaged_init_helper_called"
CODES = {"DDP106", "DDP121"}


def _helper_codes(paths: list[str]) -> set[str]:
    outcome = check_paths(paths, CheckOptions(select=("ALL",)))
    return {f.code for f in outcome.findings if f.location.path.endswith("dist.py")} & CODES


@pytest.mark.parametrize(("project", "codes"), [(UNUSED, set()), (CALLED, CODES)])
def test_the_helper_alone_is_judged_as_in_its_folder(project: Path, codes: set[str]) -> None:
    helper = project / "vidkit" / "utils" / "dist.py"
    assert _helper_codes([str(project)]) == codes
    assert _helper_codes([str(helper)]) == codes


def test_entry_points_beside_the_package_are_found_by_the_dotted_import() -> None:
    helper = UNUSED / "vidkit" / "utils" / "dist.py"
    excludes = IgnoreRules.defaults(str(UNUSED))
    found = importers_of(str(helper), str(UNUSED), excludes)
    assert [Path(p).relative_to(UNUSED).as_posix() for p in found] == ["tools/train.py"]
    # never above the check's root: from the package's own folder, tools/ is out of reach
    assert importers_of(str(helper), str(UNUSED / "vidkit"), excludes) == []
    source = helper.read_text(encoding="utf-8")
    starters = group_starters_beside(str(helper), source, excludes)
    assert [Path(p).name for p in starters] == ["spawn.py"]
    assert group_starters_beside(str(helper), "import torch\n", excludes) == []


def test_without_the_starter_beside_it_the_unused_helper_is_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper's init is then the only one in view, and a module out of view may call it
    (the rule's premise): judged, checked alone (from the repository root, as a pre-commit
    hook runs it, so tools/train.py is in reach) and per folder alike."""
    copy = tmp_path / "repo"
    shutil.copytree(UNUSED, copy)
    monkeypatch.chdir(copy)
    assert _helper_codes(["vidkit/utils/dist.py"]) == set()
    (copy / "vidkit" / "utils" / "spawn.py").unlink()
    assert _helper_codes(["."]) == CODES
    assert _helper_codes(["vidkit/utils/dist.py"]) == CODES
