"""`check --fix` and `--diff`: plan the edits for the findings, check them, write or show them.

As in ruff, fixes are safe (they keep what the program does where it already worked: a second
spelling of an option, map_location="cpu", `.module` of a wrapper the data flow says is DDP,
destroy_process_group() at the end, torchrun for torch.distributed.launch) or unsafe (they
change what runs on which rank or when: a rank-0 guard around torch.save, set_epoch at the top
of the epoch loop), and unsafe ones need --unsafe-fixes. Every fixed file must still parse, or
none of its edits is kept. Notebooks are reported, never rewritten.
"""

from __future__ import annotations

import ast
import difflib
import re
import warnings
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ddp_doctor.model import Finding
from ddp_doctor.script.files import PYTHON, TEXT, Candidate, Unreadable, kind_of, read_text
from ddp_doctor.script.hits import caused_elsewhere
from ddp_doctor.script.textscan import DOCUMENT_SUFFIXES

SAFE_FIXES = frozenset({"DDP102", "DDP103", "DDP104", "DDP117", "DDP118", "DDP121"})
UNSAFE_FIXES = frozenset({"DDP113", "DDP116"})
_LEGACY_LAUNCH = re.compile(r"(?:\S*python[\w.]*\s+)?-m\s+torch\.distributed\.launch(?![\w.])")
_USE_ENV = re.compile(r"\s--use[_-]env\b")


@dataclass(frozen=True)
class FileFix:
    path: str
    old: str
    new: str
    fixed: tuple[Finding, ...]

    def diff(self) -> str:
        lines = difflib.unified_diff(
            self.old.splitlines(keepends=True),
            self.new.splitlines(keepends=True),
            fromfile=self.path,
            tofile=self.path,
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def fixable(code: str, unsafe: bool) -> bool:
    return code in SAFE_FIXES or (unsafe and code in UNSAFE_FIXES)


def plan_fixes(findings: Iterable[Finding], *, unsafe: bool = False) -> list[FileFix]:
    """The edits for every fixable finding, one FileFix per file that changes."""
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        where = finding.location
        if where is None or where.cell is not None or not fixable(finding.code, unsafe):
            continue
        if caused_elsewhere(finding.evidence):
            continue  # reported on the entry point, caused in a helper: the edit is not here
        by_path[where.path].append(finding)
    planned = []
    for path, group in sorted(by_path.items()):
        fix = _fix_file(path, group)
        if fix is not None:
            planned.append(fix)
    return planned


@dataclass(frozen=True)
class Replacement:
    """Whole lines start_line..end_line (1-based) replaced by `text`; an insertion when
    end_line < start_line (the text goes before start_line)."""

    start_line: int
    end_line: int
    text: str


@dataclass(frozen=True)
class FindingFix:
    path: str
    safe: bool
    replacements: tuple[Replacement, ...]


def fixes_by_finding(findings: Iterable[Finding], *, unsafe: bool = False) -> dict[int, FindingFix]:
    """For SARIF: each fixable finding's own edit, by its index in `findings`, as line
    replacements of the file as it is now."""
    found: dict[int, FindingFix] = {}
    for number, finding in enumerate(findings):
        where = finding.location
        if where is None or where.cell is not None or not fixable(finding.code, unsafe):
            continue
        if caused_elsewhere(finding.evidence):
            continue
        fix = _fix_file(where.path, [finding])
        if fix is not None:
            safe = finding.code in SAFE_FIXES
            found[number] = FindingFix(where.path, safe, line_replacements(fix.old, fix.new))
    return found


def line_replacements(old: str, new: str) -> tuple[Replacement, ...]:
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            out.append(Replacement(i1 + 1, i2, "".join(after[j1:j2])))
    return tuple(out)


def write_fixes(planned: Iterable[FileFix]) -> int:
    """Write the fixed files; how many findings they fixed."""
    count = 0
    for fix in planned:
        with open(fix.path, "w", encoding="utf-8", newline="") as stream:
            stream.write(fix.new)
        count += len(fix.fixed)
    return count


def _fix_file(path: str, findings: list[Finding]) -> FileFix | None:
    kind = kind_of(path)
    if kind is None:
        return None
    text = read_text(Candidate(path, kind))
    if isinstance(text, Unreadable):
        return None
    if kind == TEXT:
        return _fix_launch_lines(path, text, findings)
    if kind == PYTHON:
        return _fix_python(path, text, findings)
    return None


def _fix_python(path: str, text: str, findings: list[Finding]) -> FileFix | None:
    from ddp_doctor.script import cst_fixes  # libcst only when a fix is asked for

    try:
        module = cst_fixes.Module(text)
    except Exception:  # libcst's parser error: the file is reported, not rewritten
        return None
    edits = cst_fixes.Edits()
    fixed = tuple(f for f in findings if cst_fixes.plan(module, f, edits))
    if not fixed:
        return None
    new = cst_fixes.apply(module, edits)
    if new == text or not _parses(new):
        return None
    return FileFix(path, text, new, fixed)


def _fix_launch_lines(path: str, text: str, findings: list[Finding]) -> FileFix | None:
    """torch.distributed.launch becomes torchrun in shell scripts, YAML and Makefiles."""
    if path.lower().endswith(DOCUMENT_SUFFIXES):
        return None  # documentation is the author's to reword
    fixed = tuple(f for f in findings if f.code == "DDP102")
    if not fixed:
        return None
    lines = text.splitlines(keepends=True)
    out = []
    for line in lines:
        if not line.lstrip().startswith("#") and _LEGACY_LAUNCH.search(line):
            line = _USE_ENV.sub("", _LEGACY_LAUNCH.sub("torchrun", line))
        out.append(line)
    new = "".join(out)
    return FileFix(path, text, new, fixed) if new != text else None


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Control characters of the user's files shown escaped, never sent to a terminal."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
