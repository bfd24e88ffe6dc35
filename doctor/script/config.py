"""`[tool.ddp-doctor]` in the nearest pyproject.toml that has one.

[tool.ddp-doctor]
select = ["DDP1"]                    # codes, code prefixes or rule names
ignore = ["DDP119", "log-on-every-rank"]
exclude = ["experiments/old/"]       # gitignore-style, relative to this pyproject.toml
per-file-ignores = { "tests/*.py" = ["DDP116"] }
fail-on = "warning"                  # every command's --fail-on default
format = "json"                      # every command's --format default, where it has one

`select` and `ignore` are also the defaults of the commands other than `check` (which applies
them per file); the command line always wins.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from ddp_doctor.inputs import read_capped
from ddp_doctor.registry import Selector, UnknownSelector

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_KEYS = frozenset({"select", "ignore", "exclude", "per-file-ignores", "fail-on", "format"})
FAIL_ON = ("info", "warning", "error")
MAX_CONFIG_BYTES = 1024 * 1024  # a pyproject.toml; real ones are a few KiB


class ConfigError(ValueError):
    """A [tool.ddp-doctor] table that cannot be used; `check` stops with exit code 2."""


@dataclass(frozen=True)
class Config:
    root: str | None = None  # the folder of the pyproject.toml, None when there is none
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    fail_on: str | None = None
    format: str | None = None

    def ignores_for(self, path: str) -> tuple[str, ...]:
        """The per-file-ignores entries whose pattern matches this file."""
        if not self.per_file_ignores or self.root is None:
            return ()
        relative = os.path.relpath(os.path.abspath(path), self.root).replace(os.sep, "/")
        name = os.path.basename(path)
        found: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if fnmatch.fnmatchcase(relative, pattern) or (
                "/" not in pattern and fnmatch.fnmatchcase(name, pattern)
            ):
                found.extend(codes)
        return tuple(found)


NO_CONFIG = Config()


class ConfigFinder:
    """Finds and caches the config that governs each folder."""

    def __init__(self) -> None:
        self._by_folder: dict[str, Config] = {}

    def for_file(self, path: str) -> Config:
        return self.for_folder(os.path.dirname(os.path.abspath(path)))

    def for_folder(self, folder: str) -> Config:
        chain: list[str] = []
        current = folder
        config = NO_CONFIG
        while True:
            if current in self._by_folder:
                config = self._by_folder[current]
                break
            chain.append(current)
            candidate = os.path.join(current, "pyproject.toml")
            if os.path.isfile(candidate):
                loaded = load(candidate)
                if loaded is not None:
                    config = loaded
                    break
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for visited in chain:
            self._by_folder[visited] = config
        return config


def load(pyproject: str) -> Config | None:
    """The [tool.ddp-doctor] table of one pyproject.toml, or None when it has none."""
    try:
        data = tomllib.loads(read_capped(pyproject, MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read {pyproject}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{pyproject} is not valid UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{pyproject} is not valid TOML: {error}") from None
    table = data.get("tool", {}).get("ddp-doctor")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.ddp-doctor] must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{pyproject}: unknown key {unknown[0]!r} in [tool.ddp-doctor]")
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{pyproject}: per-file-ignores must be a table of pattern = [codes]")
    config = Config(
        root=os.path.dirname(os.path.abspath(pyproject)),
        select=_strings(table, "select", pyproject),
        ignore=_strings(table, "ignore", pyproject),
        exclude=_strings(table, "exclude", pyproject),
        per_file_ignores=tuple(
            (pattern, _strings(per_file, pattern, pyproject)) for pattern in per_file
        ),
        fail_on=_choice(table, "fail-on", FAIL_ON, pyproject),
        format=_choice(table, "format", None, pyproject),
    )
    _validate_selectors(config, pyproject)
    return config


def _choice(
    table: dict[str, Any], key: str, choices: tuple[str, ...] | None, pyproject: str
) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or (choices is not None and value not in choices):
        allowed = f"one of {', '.join(choices)}" if choices else "a format name"
        raise ConfigError(f"{pyproject}: {key} must be {allowed}")
    return value


def config_here(folder: str | None = None) -> Config:
    """The config that governs the working folder (or `folder`): the commands' defaults."""
    return ConfigFinder().for_folder(os.path.abspath(folder or os.getcwd()))


def _strings(table: dict[str, Any], key: str, pyproject: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{pyproject}: {key} must be a list of strings")
    return tuple(value)


def _validate_selectors(config: Config, pyproject: str) -> None:
    entries = [*config.select, *config.ignore]
    for _, codes in config.per_file_ignores:
        entries.extend(codes)
    try:
        Selector.parse(entries)
    except UnknownSelector as error:
        raise ConfigError(f"{pyproject}: {error}") from None
