"""--exclude, `exclude` and .gitignore: git's pattern rules (pathspec's GitIgnoreSpec), the last
matching pattern winning across groups; per-file-ignores keep their own fnmatch rules."""

from __future__ import annotations

import random
from pathlib import Path

import pathspec
import pytest

from ddp_doctor.script.config import Config
from ddp_doctor.script.ignore import DEFAULT_EXCLUDES, FolderNames, IgnoreRules


@pytest.mark.parametrize(
    ("patterns", "path", "is_folder", "ignored"),
    [
        (["build/"], "build", True, True),
        (["build/"], "build", False, False),  # a trailing slash is folders only
        (["build/"], "src/build/x.py", False, True),  # inside a matching folder
        (["*.log"], "a/b/run.log", False, True),
        (["*.log", "!keep.log"], "keep.log", False, False),  # the last match wins
        (["/top.py"], "top.py", False, True),
        (["/top.py"], "sub/top.py", False, False),  # a leading slash anchors
        (["doc/*.py"], "doc/a.py", False, True),
        (["doc/*.py"], "x/doc/a.py", False, False),  # so does an inner one
        (["doc/*.py"], "doc/sub/a.py", False, False),  # `*` stops at a slash
        (["a/**/b.py"], "a/x/y/b.py", False, True),
        (["**/gen"], "deep/er/gen", True, True),
        (["run[0-9].py"], "run7.py", False, True),
        (["run?.py"], "run10.py", False, False),
        (["# a comment", ""], "# a comment", False, False),
        (["\\#literal.py"], "#literal.py", False, True),
    ],
)
def test_git_pattern_rules(
    tmp_path: Path, patterns: list[str], path: str, is_folder: bool, ignored: bool
) -> None:
    rules = IgnoreRules.of(patterns, str(tmp_path))
    assert rules.ignored(str(tmp_path / path), is_folder=is_folder) is ignored


def test_a_deeper_gitignore_wins_over_its_parents(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / ".gitignore").write_text("*.py\n")
    (tmp_path / "pkg" / ".gitignore").write_text("!train.py\n")
    rules = IgnoreRules().with_gitignore(str(tmp_path)).with_gitignore(str(tmp_path / "pkg"))
    assert rules.ignored(str(tmp_path / "pkg" / "other.py"), is_folder=False)
    assert not rules.ignored(str(tmp_path / "pkg" / "train.py"), is_folder=False)
    assert not rules.ignored(str(tmp_path.parent / "elsewhere.py"), is_folder=False)  # not below


def test_the_default_excludes_skip_environments_and_caches(tmp_path: Path) -> None:
    rules = IgnoreRules.of(list(DEFAULT_EXCLUDES), str(tmp_path))
    for folder in (".venv", "x/__pycache__", "ddp_doctor.egg-info", "node_modules"):
        assert rules.ignored(str(tmp_path / folder), is_folder=True), folder
    assert not rules.ignored(str(tmp_path / "train.py"), is_folder=False)
    assert not rules.ignored(str(tmp_path / "builder"), is_folder=True)


def test_per_file_ignores_are_fnmatch_not_gitignore(tmp_path: Path) -> None:
    """Unchanged by the move to pathspec: `*` crosses folders, a bare name matches anywhere."""
    config = Config(
        root=str(tmp_path), per_file_ignores=(("tests/*", ("DDP116",)), ("conf.py", ("DDP119",)))
    )
    assert config.ignores_for(str(tmp_path / "tests" / "deep" / "t.py")) == ("DDP116",)
    assert config.ignores_for(str(tmp_path / "a" / "conf.py")) == ("DDP119",)


def _random_path(rng: random.Random, names: list[str]) -> str:
    return "/".join(rng.choice(names) for _ in range(rng.randint(1, 4)))


def test_plain_folder_names_match_as_git_would() -> None:
    """The default excludes are matched by name, not by pathspec: the two must agree."""
    names = ["build", "dist", ".venv", "a.egg-info", ".egg-info", "x", "builds", "src", "dist.py"]
    rng = random.Random(18)
    for _ in range(300):
        lines = rng.sample(["build/", "dist/", ".venv/", "*.egg-info/", "x/", "*s/"], 3)
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
        group = FolderNames(lines, "/base")
        path, is_folder = _random_path(rng, names), rng.random() < 0.5
        expected = spec.check_file(path + "/" if is_folder else path).include
        assert group.verdict(path, is_folder) == expected, (lines, path, is_folder)


def test_only_plain_folder_names_skip_pathspec(tmp_path: Path) -> None:
    assert isinstance(IgnoreRules.of(list(DEFAULT_EXCLUDES), str(tmp_path)).groups[0], FolderNames)
    for patterns in (["build/", "!build/keep/"], ["/build/"], ["b?ild/"], ["src/build/"], ["x"]):
        assert not isinstance(IgnoreRules.of(patterns, str(tmp_path)).groups[0], FolderNames)


def test_a_dist_folder_of_python_source_is_walked(tmp_path: Path) -> None:
    """Build tools write wheels, archives and executables into dist/, never a .py file directly
    in it: a `dist` folder holding one is the package's own code (DGL's
    examples/pytorch/graphsage/dist/train_dist.py, dmlc/dgl), a folder walk or a file named
    alone. build/ stays out (setuptools copies the sources into build/lib)."""
    from ddp_doctor.script.files import discover

    for name in ("src/dist/train_dist.py", "dist/app/_internal/bundled.py", "build/lib/x.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("import torch\n")
    (tmp_path / "dist/pkg-1.0-py3-none-any.whl").write_bytes(b"PK")
    rules = IgnoreRules.defaults(str(tmp_path))
    found = {
        Path(c.path).relative_to(tmp_path).as_posix() for c in discover([str(tmp_path)], rules)
    }
    assert found == {"src/dist/train_dist.py"}
    assert rules.ignored(str(tmp_path / "dist"), is_folder=True)
    assert not rules.ignored(str(tmp_path / "src/dist/train_dist.py"), is_folder=False)
    assert IgnoreRules.of(["dist/"], str(tmp_path)).ignored(
        str(tmp_path / "src/dist/train_dist.py"), is_folder=False
    )  # an explicit `dist/` pattern (--exclude, a .gitignore) keeps git's meaning


SHUFFLED_NO_SET_EPOCH = """
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def train(dataset):
    dist.init_process_group("nccl")
    sampler = DistributedSampler(dataset)
    for epoch in range(3):
        for batch in DataLoader(dataset, sampler=sampler):
            pass
"""


def test_a_file_named_on_the_command_line_is_read_inside_a_default_excluded_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build/ and .venv/ are left out of folder walks; a file the user names is read (issue 20:
    every file a user points at is read or reported), as ruff reads a path given directly."""
    from ddp_doctor.script.runner import check_paths

    for name in ("build/train.py", ".venv/train.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(SHUFFLED_NO_SET_EPOCH)
    monkeypatch.chdir(tmp_path)
    named = check_paths(["build/train.py", ".venv/train.py"])
    assert named.checked == 2 and named.excluded == 0
    assert {f.location.path for f in named.findings if f.location} == {
        "build/train.py",
        ".venv/train.py",
    }
    walked = check_paths(["."])
    assert walked.checked == 0


def test_a_named_file_the_users_own_pattern_excludes_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--exclude (or a config's exclude, a .gitignore) still applies to a named file, as
    pre-commit users rely on; the run says that a named file was left out, and why."""
    from click.testing import CliRunner

    from ddp_doctor.cli import cli

    (tmp_path / "old").mkdir()
    (tmp_path / "old/train.py").write_text(SHUFFLED_NO_SET_EPOCH)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["check", "--exclude", "old/", "old/train.py"])
    assert result.exit_code == 0
    assert "DDP121" not in result.stdout  # the file's init has no destroy: not read
    assert "1 file named on the command line left out" in result.stderr
