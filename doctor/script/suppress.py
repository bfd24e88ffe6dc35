"""Suppression comments: `# ddp-doctor: ignore[DDP113]`, `# ddp-doctor: ignore` on the line,
and flake8/ruff's `# noqa: DDP120` (codes separated by commas or spaces) and bare `# noqa`.

Entries are codes, code prefixes or rule names, comma-separated. A bare `ignore` silences every
finding on its line. The same comment works in shell and YAML (`#`) and Markdown (`<!-- -->`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ddp_doctor.model import Finding

_MARK = "ddp-doctor:"
_COMMENT = re.compile(r"ddp-doctor:\s*ignore(?:\[([^\]]*)\])?")
# ruff's grammar: a bare noqa comment, or noqa, a colon and codes; a list that names only other tools'
# codes (E501) silences no DDP finding.
_NOQA = re.compile(r"#\s*noqa(?::\s*([A-Za-z]+[0-9]+(?:[,\s]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
EVERYTHING = "*"


def suppressions(source: str) -> dict[int, set[str]]:
    """Line number -> the entries it silences (EVERYTHING for a bare ignore)."""
    lowered = source.lower()
    if _MARK not in source and "noqa" not in lowered:
        return {}
    found: dict[int, set[str]] = {}
    for number, line in enumerate(source.splitlines(), start=1):
        if "#" in line and "noqa" in line.lower():  # a comment first: lowering is the cost
            for match in _NOQA.finditer(line):
                listed = match.group(1)
                entries = {EVERYTHING} if listed is None else set(re.split(r"[,\s]+", listed))
                found.setdefault(number, set()).update(e for e in entries if e)
        if _MARK not in line:
            continue
        for match in _COMMENT.finditer(line):
            listed = match.group(1)
            entries = (
                {EVERYTHING}
                if listed is None
                else {e.strip() for e in listed.split(",") if e.strip()}
            )
            found.setdefault(number, set()).update(entries or {EVERYTHING})
    return found


def is_suppressed(finding: Finding, table: dict[int, set[str]]) -> bool:
    line = finding.location.line if finding.location else None
    entries = table.get(line) if line is not None else None
    if not entries:
        return False
    return EVERYTHING in entries or any(
        finding.code.upper().startswith(e.upper()) or finding.name == e.lower() for e in entries
    )


def without_suppressed(
    findings: Iterable[Finding], source: str, table: dict[int, set[str]] | None = None
) -> list[Finding]:
    """The findings not silenced by a comment (`table`: the source's, when already read)."""
    table = suppressions(source) if table is None else table
    return [f for f in findings if not is_suppressed(f, table)] if table else list(findings)
