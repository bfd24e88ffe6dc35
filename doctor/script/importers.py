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

A package's entry points often sit beside the package rather than in it (SlowFast's
tools/train_net.py next to slowfast/, importing `slowfast.utils.distributed`): the folders
that the helper's full dotted name resolves from (<base> for
<base>/slowfast/utils/distributed.py, folder names that are identifiers) are searched too,
nearest first, for that full name only: at most PACKAGE_UP folders above the helper's, never
above the check's root, stopping at the first that has importers. A helper that starts a
process group also brings the modules beside it that start one (SlowFast's
utils/multiprocessing.py beside utils/distributed.py): the package's other way in, which a
folder check sees (group_starters_beside).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterator

from ddp_doctor.inputs import open_regular
from ddp_doctor.script.ignore import IgnoreRules

SEARCH_UP = 1  # the folder above the helper's own (llamagen/ above utils/)
MAX_DEPTH = 3
HOPS = 2  # an importer that is a helper itself brings its own (torchtitan: trainer, train)
MAX_SCANNED = 300
MAX_HEAD_BYTES = 64 * 1024
MAX_IMPORTERS = 8
MAX_FOLDER_ENTRIES = 1000
PACKAGE_UP = 3  # slowfast/utils/distributed.py -> the folder holding slowfast/


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
    found = _scan(
        top,
        pattern_for=lambda path: beside if _folder(path) == folder else inside,
        skip=(helper,),
        excludes=excludes,
    )
    for base, dotted in _import_roots(folder, stem, top, root):
        if len(found) >= MAX_IMPORTERS:
            break
        named = _dotted_pattern(dotted)
        more = _scan(
            base, pattern_for=lambda path, named=named: named, skip=(helper, top), excludes=excludes
        )
        found += [path for path in more if path not in found][: MAX_IMPORTERS - len(found)]
        if more:
            break
    return found


def _folder(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def _scan(
    top: str,
    pattern_for: Callable[[str], re.Pattern[bytes]],
    skip: tuple[str, ...],
    excludes: IgnoreRules,
) -> list[str]:
    """The files under `top` (bounded) whose head matches their pattern; `skip` holds the
    helper and a folder already searched."""
    helper, *searched = (os.path.abspath(p) for p in skip)
    found: list[str] = []
    for path in itertools.islice(_python_files(top, excludes), MAX_SCANNED):
        absolute = os.path.abspath(path)
        if absolute == helper or any(absolute.startswith(s + os.sep) for s in searched):
            continue
        head = _head(path)
        if head is not None and pattern_for(path).search(head) is not None:
            found.append(path)
            if len(found) >= MAX_IMPORTERS:
                break
    return found


def _import_roots(folder: str, stem: str, top: str, root: str) -> Iterator[tuple[str, str]]:
    """(base, dotted name) for the folders above the first search, nearest first, from which
    the helper's full dotted name resolves: <base>/slowfast/utils/distributed.py is
    `slowfast.utils.distributed` from <base>; at most PACKAGE_UP folders up, not above
    `root`, only through folders whose names are identifiers."""
    parts = folder.split(os.sep)
    for depth in range(2, PACKAGE_UP + 1):
        base = os.sep.join(parts[:-depth])
        if len(parts) <= depth or not all(part.isidentifier() for part in parts[-depth:]):
            return
        if not (base == root or base.startswith(root + os.sep)):
            return
        if top.startswith(base + os.sep):
            yield base, ".".join([*parts[-depth:], stem])


def _dotted_pattern(dotted: str) -> re.Pattern[bytes]:
    """`import a.b.stem`, `from a.b.stem import`, `from a.b import stem`."""
    package, stem = (re.escape(p) for p in dotted.rsplit(".", 1))
    forms = [
        rf"import[ \t]+{package}\.{stem}\b",
        rf"from[ \t]+{package}\.{stem}[ \t]+import\b",
        rf"from[ \t]+{package}[ \t]+import[^\n]*\b{stem}\b",
    ]
    return re.compile(rb"^[ \t]*(?:" + "|".join(forms).encode() + rb")", re.MULTILINE)


def group_starters_beside(helper: str, source: str, excludes: IgnoreRules) -> list[str]:
    """The modules in the helper's own folder that start a process group themselves, for a
    helper that starts one: in a folder check they are in view, and an init of the helper
    that nothing calls, beside one of theirs that may run, never runs (evidence.py)."""
    if "init_process_group" not in source:
        return []
    folder = os.path.dirname(os.path.abspath(helper))
    found: list[str] = []
    for path, is_folder in _entries(folder):
        if is_folder or not path.endswith(".py") or excludes.ignored(path, is_folder=False):
            continue
        if os.path.abspath(path) == os.path.abspath(helper):
            continue
        head = _head(path)
        if head is not None and _STARTS_A_GROUP.search(head) is not None:
            found.append(path)
            if len(found) >= MAX_IMPORTERS:
                break
    return found


_STARTS_A_GROUP = re.compile(rb"\binit_process_group[ \t]*\(")


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


def _head(path: str) -> bytes | None:
    try:
        with open_regular(path) as stream:  # a fifo or device is refused, never blocks
            return stream.read(MAX_HEAD_BYTES)
    except (OSError, ValueError):
        return None


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
