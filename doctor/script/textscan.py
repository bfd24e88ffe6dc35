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


def logical_lines(lines: Sequence[str]) -> list[str]:
    """Shell lines with their backslash continuations joined (`python -m ... \\` then the
    script's path on the next line): one string per logical line."""
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    if pending:
        joined.append(pending)
    return joined


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


DOCUMENT_SUFFIXES = (".md", ".markdown", ".rst")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RST_BLOCK = re.compile(r"(::\s*$)|^\s*\.\.\s+(code-block|code|sourcecode)::")


def code_lines(path: str, lines: Sequence[str]) -> list[str]:
    """The lines a launch scan reads: all of a shell script or YAML file; of a Markdown or
    reStructuredText document only its code blocks (fenced, or RST literal and code-block
    directives), prose blanked so that line numbers stay true. A CHANGELOG line that names the
    launcher in a sentence is not a launch line."""
    if not path.lower().endswith(DOCUMENT_SUFFIXES):
        return list(lines)
    return _rst_code(lines) if path.lower().endswith(".rst") else _fenced(lines)


def _fenced(lines: Sequence[str]) -> list[str]:
    kept, inside = [], False
    for line in lines:
        if _FENCE.match(line):
            inside = not inside
            kept.append("")
            continue
        kept.append(line if inside else "")
    return kept


def _rst_code(lines: Sequence[str]) -> list[str]:
    kept: list[str] = []
    block_indent: int | None = None  # indentation of the paragraph that opened the block
    opened = False
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if opened and line.strip() and indent > (block_indent or 0):
            kept.append(line)
            continue
        if opened and not line.strip():
            kept.append("")
            continue
        opened = False
        kept.append("")
        if _RST_BLOCK.search(line):
            opened, block_indent = True, indent
    return kept
