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
