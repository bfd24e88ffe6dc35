"""What `logs` finds in a text, in the two shapes the logs tests assert on."""

from __future__ import annotations

from ddp_doctor.logscan import scan_text
from ddp_doctor.model import Finding


def codes(text: str) -> list[str]:
    """The codes of the findings, in the report's order."""
    return [finding.code for finding in scan_text(text)]


def by_code(text: str) -> dict[str, Finding]:
    """The findings by code."""
    return {finding.code: finding for finding in scan_text(text)}
