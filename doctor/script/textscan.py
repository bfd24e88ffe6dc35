"""Plain-text scans of launch files (shell, YAML, Makefiles, Markdown) and of Python strings."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

_LAUNCH = re.compile(
    r"-m\s+torch\.distributed\.launch(?![\w.])|torch/distributed/launch\.py(?![\w.])"
)
_RENAMED = re.compile(
    r"(?<![\w$])(NCCL_ASYNC_ERROR_HANDLING|NCCL_BLOCKING_WAIT|NCCL_DESYNC_DEBUG)\b"
)


def launch_mentions(lines: Sequence[str], *, skip_comments: bool) -> Iterator[tuple[int, int, str]]:
    """(line, 0-based column, matched text) of each `-m torch.distributed.launch` or its path."""
    for number, line in enumerate(lines, start=1):
        if "launch" not in line or (skip_comments and line.lstrip().startswith("#")):
            continue
        for match in _LAUNCH.finditer(line):
            yield number, match.start(), match.group(0)


def launch_in_string(text: str) -> Iterator[tuple[str, int]]:
    """Each launcher mention in a Python string, with its offset in the string."""
    for match in _LAUNCH.finditer(text):
        yield match.group(0), match.start()


def renamed_nccl_variables(lines: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    for number, line in enumerate(lines, start=1):
        if "NCCL_" not in line or line.lstrip().startswith("#"):
            continue
        for match in _RENAMED.finditer(line):
            yield number, match.start(), match.group(1)
