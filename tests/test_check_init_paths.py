"""Modules found through `import _init_paths` (HRNet's and CvT's tools/ idiom, which puts
../lib on sys.path), and factory arms ruled out by an `and`/`or` test of the call's
constants (evalloaders._either). Set U's CvT: `valid_loader = build_dataloader(config, False,
args.distributed)` in tools/train.py, the factory in lib/dataset/build.py."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
PADDING = PROJECTS / "eval_loader_through_init_paths"
NO_PADDING = PROJECTS / "eval_loader_through_init_paths_no_padding"


def _ddp114(root: Path) -> list[tuple[str, int]]:
    outcome = check_paths([str(root)], CheckOptions(select=("DDP114",)))
    return [(Path(f.location.path).name, f.location.line) for f in outcome.findings]


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def test_the_factory_in_lib_is_found_through_init_paths() -> None:
    assert _ddp114(PADDING) == [("train.py", 18)]


def test_the_entry_point_checked_alone_finds_lib() -> None:
    assert _ddp114(PADDING / "tools" / "train.py") == [("train.py", 18)]


def test_without_the_import_lib_is_not_on_the_path(tmp_path: Path) -> None:
    project = _copy(PADDING, tmp_path)
    train = project / "tools" / "train.py"
    train.write_text(train.read_text().replace("import _init_paths  # noqa: F401\n", ""))
    (project / "tools" / "_init_paths.py").unlink()
    assert _ddp114(project) == []


def test_an_and_test_with_a_false_constant_rules_the_sampler_out() -> None:
    assert _ddp114(NO_PADDING) == []


def test_an_and_test_with_an_unknown_part_keeps_the_sampler(tmp_path: Path) -> None:
    project = _copy(NO_PADDING, tmp_path)
    train = project / "tools" / "train.py"
    text = train.read_text().replace(
        "build_dataloader(False, True)", "build_dataloader(bool(os.environ.get('T')), True)"
    )
    train.write_text(text)
    assert [name for name, _ in _ddp114(project)] == ["train.py"]


def test_an_or_test_with_a_true_constant_keeps_the_sampler(tmp_path: Path) -> None:
    project = _copy(NO_PADDING, tmp_path)
    build = project / "lib" / "dataset" / "build.py"
    build.write_text(
        build.read_text().replace("distributed and is_train", "distributed or is_train")
    )
    assert [name for name, _ in _ddp114(project)] == ["train.py"]
