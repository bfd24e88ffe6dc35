"""Turning a node of the user's script into a located Hit, and one finding per cause."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from ddp_doctor.model import Location
from ddp_doctor.registry import Hit
from ddp_doctor.script.facts import ScriptFacts

_LINES_LISTED = 10


@dataclass(frozen=True)
class ScriptHit(Hit):
    """A hit with the cause it shares with others: the same mistake on many lines (every
    `.cuda()` of a script with no set_device) is one finding, the other lines listed."""

    cause: str | None = None


def spelled_like(path: str, given: str) -> str:
    """Another file's path spelled like the path the user gave: relative stays relative (the
    files a program imports are read by absolute path; a message must not show the machine's
    folders when the user named a relative one)."""
    if os.path.isabs(given) or not os.path.isabs(path):
        return path
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


# The roles of a finding's related places (evidence["related"], SARIF relatedLocations):
CAUSE = "cause"  # the mistake itself, in a helper; the finding sits on the entry point's call
PLACEMENT = "placement"  # the helper line that places the GPU with what the call hands it
PROCESS_GROUP = "process-group"  # the init_process_group call that a late pin follows


def related_place(path: str, node: ast.AST | None, role: str) -> dict[str, object]:
    """Another place the finding names, with its role (path spelled as the user gave it)."""
    return {
        "path": path,
        "line": getattr(node, "lineno", 1),
        "column": getattr(node, "col_offset", 0) + 1,
        "role": role,
    }


def caused_elsewhere(evidence: Mapping[str, object]) -> bool:
    """Reported on the entry point, caused in a helper: the edit that fixes it is not here."""
    places = evidence.get("related")
    return isinstance(places, list) and any(
        isinstance(place, dict) and place.get("role") == CAUSE for place in places
    )


def location(
    facts: ScriptFacts, node: ast.AST | None = None, *, line: int = 1, column: int = 0
) -> Location:
    """1-based line and character column (ast gives a 0-based UTF-8 byte offset)."""
    if node is not None:
        line = getattr(node, "lineno", line)
        column = getattr(node, "col_offset", column)
    text = facts.lines[line - 1] if 0 < line <= len(facts.lines) else ""
    if column and not text.isascii():
        column = len(text.encode("utf-8")[:column].decode("utf-8", errors="ignore"))
    return Location(facts.path, line, column + 1)


def hit(
    facts: ScriptFacts,
    node: ast.AST | None,
    message: str,
    evidence: Mapping[str, object] | None = None,
    *,
    cause: str | None = None,
    **overrides: object,
) -> ScriptHit:
    return ScriptHit(
        message=message,
        evidence=dict(evidence or {}),
        location=location(facts, node),
        cause=cause,
        **overrides,  # type: ignore[arg-type]
    )


def merge_causes(hits: Iterable[Hit]) -> list[Hit]:
    """Hits with the same cause become the first of them, naming the other lines."""
    merged: list[Hit] = []
    by_cause: dict[str, list[Hit]] = {}
    for found in hits:
        cause = found.cause if isinstance(found, ScriptHit) else None
        if cause is None:
            merged.append(found)
        elif cause in by_cause:
            by_cause[cause].append(found)
        else:
            by_cause[cause] = [found]
            merged.append(found)
    return [_with_other_lines(h, by_cause[h.cause]) if _grouped(h, by_cause) else h for h in merged]


def _grouped(found: Hit, by_cause: dict[str, list[Hit]]) -> bool:
    cause = found.cause if isinstance(found, ScriptHit) else None
    return cause is not None and len(by_cause[cause]) > 1


def _with_other_lines(first: Hit, group: list[Hit]) -> Hit:
    lines = sorted({h.location.line for h in group[1:] if h.location and h.location.line})
    lines = [n for n in lines if first.location is None or n != first.location.line]
    if not lines:
        return first
    shown = ", ".join(str(n) for n in lines[:_LINES_LISTED])
    more = f" and {len(lines) - _LINES_LISTED} more" if len(lines) > _LINES_LISTED else ""
    word = "line" if len(lines) == 1 else "lines"
    evidence = {**first.evidence, "also_lines": lines}
    return replace(first, message=f"{first.message} (also {word} {shown}{more})", evidence=evidence)
