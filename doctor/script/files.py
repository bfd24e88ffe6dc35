"""Which files `check` looks at, and reading them as text without ever importing them.

Folders are walked recursively (symlinked folders followed once: a loop is reported, not
walked forever), minus the default excludes, .gitignore files met on the way and --exclude.
Python files are parsed; shell, YAML, Makefile and Markdown files are scanned as text.
"""

from __future__ import annotations

import ast
import errno
import io
import itertools
import os
import re
import tokenize
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ddp_doctor.inputs import NotRegularFile, TooLarge, describe_size, open_regular, read_capped
from ddp_doctor.script.ignore import IgnoreRules
from ddp_doctor.script.shellvars import expand_variables
from ddp_doctor.script.tokencount import ascii_token_count

PYTHON = "python"
TEXT = "text"
NOTEBOOK = "notebook"  # a Jupyter .ipynb: its code cells are read as one script
TEXT_SUFFIXES = (
    ".sh",
    ".bash",
    ".yaml",
    ".yml",
    ".md",
    ".markdown",
    ".rst",
    ".slurm",
    ".sbatch",
    ".mk",
)
TEXT_NAMES = frozenset({"Makefile", "makefile", "GNUmakefile"})
# The launch scripts a file named alone brings along (launch_scripts_beside): small shell and
# SLURM scripts of its folder, read only to see what starts it.
LAUNCH_SCRIPT_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch")
MAX_LAUNCH_SCRIPT_BYTES = 64 * 1024
MAX_FOLDER_ENTRIES = 1000
MAX_LAUNCH_SCRIPTS = 50
# A `scripts` folder beside a file named alone holds its launch scripts too (VideoMAE's
# scripts/<dataset>/<run>/pretrain.sh starting run_mae_pretraining.py): read that far down.
SCRIPTS_FOLDER = "scripts"
MAX_SCRIPTS_DEPTH = 3
MAX_SCRIPTS_FOLDERS = 100
MAX_BYTES = 10 * 1024 * 1024
# Parsing and analysing cost memory per token, not per byte (~1-2 KiB per token for dense
# code): past this many tokens a file is skipped, which keeps `check` under ~200 MB.
MAX_TOKENS = 100_000
_TOKEN = re.compile(r"\w+|[^\w\s]|\n")  # a name or number, an operator character, a newline
_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Candidate:
    path: str  # as shown in reports: relative paths stay relative
    kind: str  # PYTHON or TEXT


@dataclass(frozen=True)
class Unreadable:
    path: str
    reason: str


@dataclass(frozen=True)
class Excluded:
    """A file named on the command line that an exclude pattern of the user's matches."""

    path: str


def kind_of(path: str) -> str | None:
    name = os.path.basename(path)
    if name.endswith(".py"):
        return PYTHON
    if name.endswith(".ipynb"):
        return NOTEBOOK
    if name.endswith(TEXT_SUFFIXES) or name in TEXT_NAMES:
        return TEXT
    return None


def discover(
    paths: list[str], excludes: IgnoreRules
) -> Iterator[Candidate | Unreadable | Excluded]:
    """Candidates in a stable order; explicit file arguments count even without a known suffix,
    and inside a default-excluded folder (build/, .venv/); one the user's own patterns exclude
    (--exclude, a config's `exclude`, a .gitignore) is reported as Excluded, not read."""
    seen: set[str] = set()
    for given in paths:
        path = os.path.normpath(given)
        if not os.path.lexists(path):
            yield Unreadable(path, "no such file or folder")
        elif os.path.isdir(path):
            for found in _walk(path, excludes):
                if isinstance(found, Unreadable) or found.path not in seen:
                    seen.add(found.path)
                    yield found
        elif not os.path.exists(path):
            yield Unreadable(path, _broken_link_reason(path))
        elif excludes.chosen().ignored(path, is_folder=False):
            yield Excluded(path)
        elif path not in seen:
            seen.add(path)
            yield Candidate(path, kind_of(path) or _sniff_kind(path))


def launch_scripts_beside(
    paths: Sequence[str], excludes: IgnoreRules
) -> list[tuple[Candidate, str]]:
    """The shell and SLURM scripts in the folders of Python files named on their own that name
    one of them, with their text: `check train.py` counts `distributed_train.sh` (`python -m
    torch.distributed.launch --nproc_per_node=$1 train.py`) as how train.py is run. Each
    folder is read once. Bounded: the first MAX_FOLDER_ENTRIES entries of a folder, at most
    MAX_LAUNCH_SCRIPTS scripts of at most MAX_LAUNCH_SCRIPT_BYTES each, regular files only;
    one that cannot be read is skipped (it is not being checked). A `scripts` folder beside
    them is read too, MAX_SCRIPTS_DEPTH levels down at most (its links not followed), with
    the same bound on scripts and at most MAX_SCRIPTS_FOLDERS folders."""
    by_folder: dict[str, set[str]] = {}
    for path in paths:
        by_folder.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
    found: list[tuple[Candidate, str]] = []
    for folder, named in sorted(by_folder.items()):
        for script, text in _launch_scripts_of(folder, excludes):
            if any(name in text for name in named) or _names_through_variables(script, text, named):
                found.append((Candidate(script, TEXT), text))
    return found


def _names_through_variables(script: str, text: str, named: set[str]) -> bool:
    """`method='unimatch'` ... `$method.py`: the script named once its variables are read."""
    if "$" not in text:
        return False
    expanded = "\n".join(expand_variables(script, text.splitlines()))
    return any(name in expanded for name in named)


def _launch_scripts_of(folder: str, excludes: IgnoreRules) -> Iterator[tuple[str, str]]:
    """The small scripts of the folder, then those of its `scripts` folder and below."""
    yield from _small_scripts(folder, excludes)
    below = os.path.normpath(os.path.join(folder, SCRIPTS_FOLDER))
    if not os.path.isdir(below) or os.path.islink(below):
        return
    if excludes.ignored(below, is_folder=True):
        return
    scripts = itertools.chain.from_iterable(
        _small_scripts(sub, excludes) for sub in _folders_below(below, excludes)
    )
    yield from itertools.islice(scripts, MAX_LAUNCH_SCRIPTS)


def _folders_below(top: str, excludes: IgnoreRules) -> list[str]:
    """`top` and its folders down to MAX_SCRIPTS_DEPTH levels, breadth first, links left out."""
    folders, frontier = [top], [top]
    for _ in range(MAX_SCRIPTS_DEPTH - 1):
        deeper = []
        for folder in frontier:
            try:
                with os.scandir(folder) as entries:
                    listed = list(itertools.islice(entries, MAX_FOLDER_ENTRIES))
            except OSError:
                continue
            deeper += sorted(
                os.path.join(folder, entry.name)
                for entry in listed
                if entry.is_dir(follow_symlinks=False)
                and not excludes.ignored(os.path.join(folder, entry.name), is_folder=True)
            )
        frontier = deeper[: MAX_SCRIPTS_FOLDERS - len(folders)]
        folders += frontier
    return folders


def _small_scripts(folder: str, excludes: IgnoreRules) -> Iterator[tuple[str, str]]:
    try:
        with os.scandir(folder or os.curdir) as entries:
            listed = sorted(e.name for e in itertools.islice(entries, MAX_FOLDER_ENTRIES))
    except OSError:
        return
    scripts = [entry for entry in listed if entry.endswith(LAUNCH_SCRIPT_SUFFIXES)]
    for entry in scripts[:MAX_LAUNCH_SCRIPTS]:
        script = os.path.normpath(os.path.join(folder, entry))
        if excludes.ignored(script, is_folder=False):
            continue
        try:
            data = read_capped(script, MAX_LAUNCH_SCRIPT_BYTES)
        except OSError:
            continue
        yield script, data.decode("utf-8", errors="replace")


def _sniff_kind(path: str) -> str:
    """An explicit file with no known suffix: Python if its #! line says so or its text parses
    as Python, else text (scanned for launch lines)."""
    try:
        with open_regular(path) as stream:
            data = stream.read(MAX_BYTES)
    except OSError:
        return TEXT
    first = data.split(b"\n", 1)[0][:200]
    if first.startswith(b"#!"):
        return PYTHON if b"python" in first else TEXT
    return PYTHON if _parses(data) else TEXT


def _parses(data: bytes) -> bool:
    """Whether the bytes are a Python module with at least one statement."""
    if b"\0" in data or not data.strip():
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return bool(tree.body)


def _walk(root: str, excludes: IgnoreRules) -> Iterator[Candidate | Unreadable]:
    visited: set[tuple[int, int]] = set()
    stack = [(root, excludes.with_gitignore(root))]
    while stack:
        folder, rules = stack.pop()
        try:
            identity = os.stat(folder)
        except OSError as error:
            yield Unreadable(folder, _reason(error))
            continue
        key = (identity.st_dev, identity.st_ino)
        if key in visited:
            yield Unreadable(folder, "symlink loop: this folder was already checked")
            continue
        visited.add(key)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as error:
            yield Unreadable(folder, _reason(error))
            continue
        subfolders = []
        for entry in entries:
            yield from _entry(entry, rules, subfolders)
        for sub in reversed(subfolders):
            stack.append((sub, rules.with_gitignore(sub)))


def _entry(
    entry: os.DirEntry[str], rules: IgnoreRules, subfolders: list[str]
) -> Iterator[Candidate | Unreadable]:
    try:
        is_folder = entry.is_dir()
    except OSError as error:
        yield Unreadable(entry.path, _reason(error))
        return
    if rules.ignored(entry.path, is_folder=is_folder):
        return
    if is_folder:
        subfolders.append(entry.path)
        return
    kind = kind_of(entry.name)
    if kind is None:
        return
    if entry.is_symlink() and not os.path.exists(entry.path):
        yield Unreadable(os.path.normpath(entry.path), _broken_link_reason(entry.path))
        return
    yield Candidate(os.path.normpath(entry.path), kind)


def _broken_link_reason(path: str) -> str:
    try:
        os.stat(path)
    except OSError as error:
        return _reason(error)
    return "broken symbolic link"


def _reason(error: OSError) -> str:
    if isinstance(error, (NotRegularFile, TooLarge)):
        return error.strerror
    if error.errno == errno.ELOOP:
        return "symlink loop"
    if error.errno == errno.ENOENT:
        return "broken symbolic link or vanished file"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return error.strerror or str(error)


def read_text(candidate: Candidate) -> str | Unreadable:
    """The file's text, or why it cannot be had: not a regular file, too big, binary, not
    decodable, unreadable."""
    path = candidate.path
    try:
        data = read_capped(path, MAX_BYTES)
    except OSError as error:
        return Unreadable(path, _reason(error))
    if b"\0" in data[:_SNIFF_BYTES]:
        return Unreadable(path, "binary file (contains NUL bytes)")
    text = _decode(path, data, candidate.kind)
    if isinstance(text, str) and too_many_tokens(text):
        return Unreadable(
            path,
            f"over {MAX_TOKENS:,} tokens ({describe_size(len(data))}): generated or minified "
            "code, too big to analyse",
        )
    return text


def too_many_tokens(text: str, limit: int = MAX_TOKENS) -> bool:
    """True past `limit` tokens; stops counting there, so a huge file costs no more than one
    at the limit."""
    if len(text) <= limit:  # every token is at least one character
        return False
    if len(text) - text.count(" ") - text.count("\t") <= limit:  # nor is a space or tab part
        return False  # of one: a bound counted in C, before the scan
    if text.isascii():  # nearly every file: counted in C too
        return ascii_token_count(text) > limit
    past_limit = itertools.islice(_TOKEN.finditer(text), limit, None)
    return next(past_limit, None) is not None


def _decode(path: str, data: bytes, kind: str) -> str | Unreadable:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        problem = error
    if kind == TEXT:
        return data.decode("utf-8", errors="replace")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        if encoding not in ("utf-8", "utf-8-sig"):
            return data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        pass
    line = data[: problem.start].count(b"\n") + 1
    return Unreadable(path, f"not valid UTF-8 (byte {problem.start}, line {line})")
