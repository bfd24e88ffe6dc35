"""Turning a node of the user's script into a located Hit."""

from __future__ import annotations

import ast
from collections.abc import Mapping

from ddp_doctor.model import Location
from ddp_doctor.registry import Hit

from .facts import ScriptFacts


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
    **overrides: object,
) -> Hit:
    return Hit(
        message=message,
        evidence=dict(evidence or {}),
        location=location(facts, node),
        **overrides,  # type: ignore[arg-type]
    )
