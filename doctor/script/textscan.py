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


_PATH_FRAGMENT = re.compile(r"^/?distributed/launch\.py$")


def launch_in_string(text: str) -> Iterator[tuple[str, int]]:
    """Each launcher mention in a Python string, with its offset in the string; a string that
    is the end of the launcher's path (`torch_dir + "/distributed/launch.py"`) counts."""
    found = False
    for match in _LAUNCH.finditer(text):
        found = True
        yield match.group(0), match.start()
    if not found and _PATH_FRAGMENT.match(text):
        yield text, 0


def is_launcher_path(parts: Sequence[str]) -> bool:
    """`os.path.join(torch_dir, "distributed", "launch.py")`: the literal tail of the path."""
    tail = "/".join(p.strip("/") for p in parts if p.strip("/"))
    return tail == "distributed/launch.py" or tail.endswith("/distributed/launch.py")


def renamed_nccl_variables(lines: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    for number, line in enumerate(lines, start=1):
        if "NCCL_" not in line or line.lstrip().startswith("#"):
            continue
        for match in _RENAMED.finditer(line):
            yield number, match.start(), match.group(1)
