"""The files of the tree that import a helper module named on its own.

`check utils/distributed.py` (a pre-commit hook naming the changed helper) judges the helper's
`init_distributed_mode(args)` without the program that calls it: whether that caller requires
GPUs first (DDP106) or destroys the group at its end (DDP121) is out of view, and so the
helper was judged as if nothing did (LlamaGen's utils/distributed.py: its only caller asserts
torch.cuda.is_available() and ends with destroy_process_group()). A folder check reads those
callers; a helper named alone now brings them too, read for context and never reported on.

Bounded: only a helper with no `__main__` in its text; the search starts SEARCH_UP folders
above the helper's folder (never above the check's root) and goes MAX_DEPTH folders down, links
not followed, excluded folders left out; at most MAX_SCANNED Python files of at most
MAX_HEAD_BYTES read each, and MAX_IMPORTERS importers per helper; an importer that is a
helper itself brings its own importers, HOPS in all. An import is recognised
from its text (`from utils.distributed import ...`, `import utils.distributed`, `from utils
import distributed`, and `from .distributed import` or `import distributed` beside it); the
import resolver then decides whether it really names the helper. A file read this way whose
import names another module of the same name (a sibling project's own utils/dist.py) still
joins the tree, and its calls may count as references to the helper's functions: that is why
the search starts only one folder up (two let fixtures/scripts/projects/*/train.py in).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator

from ddp_doctor.inputs import open_regular
from ddp_doctor.script.ignore import IgnoreRules

SEARCH_UP = 1  # the folder above the helper's own (llamagen/ above utils/)
MAX_DEPTH = 3
HOPS = 2  # an importer that is a helper itself brings its own (torchtitan: trainer, train)
MAX_SCANNED = 300
MAX_HEAD_BYTES = 64 * 1024
MAX_IMPORTERS = 8
MAX_FOLDER_ENTRIES = 1000


def is_helper_module(source: str) -> bool:
    """A module that is imported rather than run (no `__main__` anywhere in its text)."""
    return "__main__" not in source


def importers_of(helper: str, root: str, excludes: IgnoreRules) -> list[str]:
    """Paths of Python files near `helper` whose text imports it (not `helper` itself)."""
    helper = os.path.normpath(helper)
    folder, name = os.path.split(os.path.abspath(helper))
    stem = name.removesuffix(".py")
    if stem == "__init__" or not stem.isidentifier():
        return []
    root = os.path.abspath(root)
    package = os.path.basename(folder)
    top = folder
    for _ in range(SEARCH_UP):
        if top == root or not top.startswith(root + os.sep):
            break
        top = os.path.dirname(top)
    inside = _import_pattern(stem, package)
    beside = re.compile(_import_pattern(stem, None).pattern + b"|" + inside.pattern, re.MULTILINE)
    found: list[str] = []
    for path in itertools.islice(_python_files(top, excludes), MAX_SCANNED):
        if os.path.abspath(path) == os.path.abspath(helper):
            continue
        pattern = beside if os.path.dirname(os.path.abspath(path)) == folder else inside
        if _imports(path, pattern):
            found.append(path)
            if len(found) >= MAX_IMPORTERS:
                break
    return found


def _import_pattern(stem: str, package: str | None) -> re.Pattern[bytes]:
    """Import lines that name `package.stem` (or `stem` alone when it sits beside them)."""
    s = re.escape(stem)
    if package is None:
        forms = [
            rf"from[ \t]+\.*{s}[ \t]+import\b",
            rf"import[ \t]+{s}\b",
            rf"from[ \t]+\.[ \t]+import[^\n]*\b{s}\b",
        ]
    else:
        p = re.escape(package)
        dotted = rf"(?:[\w.]*\.)?{p}\.{s}"
        forms = [
            rf"from[ \t]+{dotted}[ \t]+import\b",
            rf"import[ \t]+{dotted}\b",
            rf"from[ \t]+(?:[\w.]*\.)?{p}[ \t]+import[^\n]*\b{s}\b",
        ]
    return re.compile(rb"^[ \t]*(?:" + "|".join(forms).encode() + rb")", re.MULTILINE)


def _imports(path: str, pattern: re.Pattern[bytes]) -> bool:
    try:
        with open_regular(path) as stream:  # a fifo or device is refused, never blocks
            head = stream.read(MAX_HEAD_BYTES)
    except (OSError, ValueError):
        return False
    return pattern.search(head) is not None


def _python_files(top: str, excludes: IgnoreRules) -> Iterator[str]:
    """The .py files of `top` and its folders down to MAX_DEPTH levels, breadth first."""
    frontier = [top]
    for _ in range(MAX_DEPTH + 1):
        deeper: list[str] = []
        for folder in frontier:
            for path, is_folder in _entries(folder):
                if excludes.ignored(path, is_folder=is_folder):
                    continue
                if is_folder:
                    deeper.append(path)
                elif path.endswith(".py"):
                    yield path
        frontier = deeper


def _entries(folder: str) -> list[tuple[str, bool]]:
    """(path, is a folder) of the folder's first entries, by name; links are neither."""
    try:
        with os.scandir(folder) as entries:
            listed = sorted(itertools.islice(entries, MAX_FOLDER_ENTRIES), key=lambda e: e.name)
            return [
                (os.path.join(folder, e.name), e.is_dir(follow_symlinks=False))
                for e in listed
                if e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False)
            ]
    except OSError:
        return []
