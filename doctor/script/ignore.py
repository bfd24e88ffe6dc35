"""gitignore-style path patterns, for --exclude, `exclude` in the config and .gitignore files.

Matched by pathspec's GitIgnoreSpec (git's wildmatch: `*`, `?`, `[...]`, `**`, a leading or
inner `/` anchors to the pattern's base folder, a trailing `/` is folders only, `!` negates).
The last matching pattern wins, as in git, also across groups: a folder's .gitignore counts
after its parents' and after --exclude. A group of plain folder names only (`build/`,
`*.egg-info/`: the default excludes) is matched by name, which is what git's rules come to for
such patterns, so a run with no other pattern does not import pathspec (7 ms of start-up).
(per-file-ignores keep their own fnmatch rules, in config.py.)
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

DEFAULT_EXCLUDES = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    ".venv/",
    "venv/",
    ".tox/",
    ".nox/",
    "node_modules/",
    "site-packages/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".pytest_cache/",
    ".eggs/",
    "*.egg-info/",
    "build/",
    "dist/",
)

# Build tools write `dist/` with wheels, archives and executables, never Python source directly
# in it: a default-excluded `dist` folder that holds a .py file is the package's own code (DGL's
# examples/pytorch/graphsage/dist, tests/dist), so it is walked. `build/` is not: setuptools
# copies the sources into build/lib.
SOURCE_WHEN_PYTHON = frozenset({"dist"})
MAX_SNIFFED_ENTRIES = 4096

# Each pattern is a compiled regex tried on every path: real .gitignore files are a few KiB.
MAX_GITIGNORE_BYTES = 64 * 1024


# `name/` or `*suffix/`: unanchored, folders only, no wildcard but a leading `*`.
FOLDER_NAME = re.compile(r"(\*?)([A-Za-z0-9_.+-]+)/")


class FolderNames:
    """A group of plain folder names: a path is matched when one of its folders has one of the
    names (or ends with one of the suffixes), as git matches `name/` and `*suffix/`."""

    def __init__(
        self,
        lines: Sequence[str],
        base: str,
        source_names: frozenset[str] = frozenset(),
        built_in: bool = False,
    ) -> None:
        matches = [FOLDER_NAME.fullmatch(line) for line in lines]
        self.names = frozenset(m.group(2) for m in matches if m and not m.group(1))
        self.suffixes = tuple(m.group(2) for m in matches if m and m.group(1))
        self.base = base  # absolute
        self.source_names = source_names  # names not matched on a folder that holds a .py file
        self.built_in = built_in  # DEFAULT_EXCLUDES, which a file named on the command line skips
        self._holds_python: dict[str, bool] = {}

    @staticmethod
    def covers(lines: Sequence[str]) -> bool:
        return all(FOLDER_NAME.fullmatch(line) for line in lines)

    def verdict(self, relative: str, is_folder: bool) -> bool | None:
        parts = relative.split("/")
        folders = parts if is_folder else parts[:-1]
        for depth, part in enumerate(folders):
            if part.endswith(self.suffixes):
                return True
            if part in self.names and not self._is_source(parts[: depth + 1]):
                return True
        return None

    def _is_source(self, parts: list[str]) -> bool:
        if parts[-1] not in self.source_names:
            return False
        folder = os.path.join(self.base, *parts)
        if folder not in self._holds_python:
            self._holds_python[folder] = _holds_python(folder)
        return self._holds_python[folder]


class PatternGroup:
    """The patterns of one source (a .gitignore, --exclude, a config), relative to one folder."""

    def __init__(self, lines: Sequence[str], base: str) -> None:
        self.lines = tuple(lines)
        self.base = base  # absolute
        self._spec: Any = None

    def verdict(self, relative: str, is_folder: bool) -> bool | None:
        """True: ignored, False: a negation re-includes it, None: no pattern matches."""
        if self._spec is None:
            import pathspec

            self._spec = pathspec.GitIgnoreSpec.from_lines(self.lines)
        return self._spec.check_file(relative + "/" if is_folder else relative).include


class IgnoreRules:
    """Ordered pattern groups; `ignored(path)` applies them like git does."""

    def __init__(self, groups: tuple[FolderNames | PatternGroup, ...] = ()) -> None:
        self.groups = groups

    @classmethod
    def of(cls, texts: Sequence[str], base: str) -> IgnoreRules:
        lines = [text for text in texts if text.strip() and not text.startswith("#")]
        if not lines:
            return cls()
        kind = FolderNames if FolderNames.covers(lines) else PatternGroup
        return cls((kind(lines, os.path.abspath(base)),))

    @classmethod
    def defaults(cls, base: str) -> IgnoreRules:
        """DEFAULT_EXCLUDES relative to `base`, a `dist` folder of Python source left in."""
        group = FolderNames(DEFAULT_EXCLUDES, os.path.abspath(base), SOURCE_WHEN_PYTHON, True)
        return cls((group,))

    def chosen(self) -> IgnoreRules:
        """The user's own groups (--exclude, configs, .gitignore files), the built-in defaults
        left out: a file named on the command line is read even inside build/ or .venv/."""
        return IgnoreRules(tuple(g for g in self.groups if not getattr(g, "built_in", False)))

    def plus(self, other: IgnoreRules) -> IgnoreRules:
        return IgnoreRules(self.groups + other.groups) if other.groups else self

    def with_gitignore(self, folder: str) -> IgnoreRules:
        """Plus the folder's .gitignore; one that is missing, not a regular file or over
        MAX_GITIGNORE_BYTES is not applied."""
        from ddp_doctor.inputs import read_capped

        try:
            data = read_capped(os.path.join(folder, ".gitignore"), MAX_GITIGNORE_BYTES)
        except OSError:
            return self
        lines = data.decode("utf-8", errors="replace").splitlines()
        return self.plus(IgnoreRules.of(lines, folder))

    def ignored(self, path: str, *, is_folder: bool) -> bool:
        absolute = os.path.abspath(path)
        ignored = False
        for group in self.groups:
            relative = _relative(absolute, group.base)
            if relative is None:
                continue
            verdict = group.verdict(relative, is_folder)
            if verdict is not None:
                ignored = verdict
        return ignored


def _holds_python(folder: str) -> bool:
    """Whether a .py file lies directly in the folder (its first MAX_SNIFFED_ENTRIES entries)."""
    try:
        with os.scandir(folder) as entries:
            listed = itertools.islice(entries, MAX_SNIFFED_ENTRIES)
            return any(e.name.endswith(".py") and e.is_file() for e in listed)
    except OSError:
        return False


def _relative(path: str, base: str) -> str | None:
    if path == base:
        return None
    prefix = base.rstrip(os.sep) + os.sep
    if not path.startswith(prefix):
        return None
    return PurePosixPath(*path[len(prefix) :].split(os.sep)).as_posix()
