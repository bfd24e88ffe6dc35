"""gitignore-style path patterns, for --exclude, `exclude` in the config and .gitignore files.

Supported: `*`, `?`, `[...]`, `**`, a leading `/` (anchored to the pattern's base folder),
a slash inside the pattern (also anchored), a trailing `/` (folders only), and `!` negation;
the last matching pattern wins, as in git.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

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

# Each pattern is a compiled regex tried on every path: real .gitignore files are a few KiB.
MAX_GITIGNORE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]  # the path itself
    under: re.Pattern[str]  # a path inside a matching folder
    base: str  # absolute folder the pattern is relative to
    negated: bool
    folders_only: bool


def compile_pattern(text: str, base: str) -> Pattern | None:
    text = text.rstrip("\n")
    if not text.strip() or text.startswith("#"):
        return None
    text = text.rstrip() if not text.endswith("\\ ") else text
    negated = text.startswith("!")
    if negated:
        text = text[1:]
    folders_only = text.endswith("/")
    text = text.rstrip("/")
    anchored = "/" in text
    text = text.lstrip("/")
    if not text:
        return None
    body = ("" if anchored else "(?:.*/)?") + _translate(text)
    exact = re.compile(body + r"\Z", re.DOTALL)
    under = re.compile(body + r"/.*\Z", re.DOTALL)
    return Pattern(exact, under, base, negated, folders_only)


def _translate(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob[i] == "*":
            out.append(".*" if glob.startswith("**", i) else "[^/]*")
            i += 2 if glob.startswith("**", i) else 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 1 :]:
            end = glob.index("]", i + 1)
            inner = glob[i + 1 : end].replace("\\", "\\\\")
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]")
            i = end + 1
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


class IgnoreRules:
    """An ordered list of patterns; `ignored(path)` applies them like git does."""

    def __init__(self, patterns: tuple[Pattern, ...] = ()) -> None:
        self.patterns = patterns

    @classmethod
    def of(cls, texts: tuple[str, ...] | list[str], base: str) -> IgnoreRules:
        compiled = (compile_pattern(t, os.path.abspath(base)) for t in texts)
        return cls(tuple(p for p in compiled if p is not None))

    def plus(self, other: IgnoreRules) -> IgnoreRules:
        return IgnoreRules(self.patterns + other.patterns) if other.patterns else self

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
        verdict = False
        for pattern in self.patterns:
            relative = _relative(absolute, pattern.base)
            if relative is None:
                continue
            exact = pattern.regex.match(relative) and (is_folder or not pattern.folders_only)
            if exact or pattern.under.match(relative):
                verdict = not pattern.negated
        return verdict


def _relative(path: str, base: str) -> str | None:
    if path == base:
        return None
    prefix = base.rstrip(os.sep) + os.sep
    if not path.startswith(prefix):
        return None
    return PurePosixPath(*path[len(prefix) :].split(os.sep)).as_posix()
