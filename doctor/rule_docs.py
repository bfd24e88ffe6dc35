"""Every rule's documentation and default fix, as the rule modules attach them, kept in
rule_docs.json so that `explain` prints one without importing the module (and everything that
module's check needs: about 40 ms for a script rule). The modules stay the source:
tests/test_code_table.py fails when the file is stale, and `UPDATE_GOLDEN=1` rewrites it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddp_doctor.codes import BY_CODE
from ddp_doctor.model import Remediation
from ddp_doctor.registry import RuleSpec

DOCS_FILE = Path(__file__).with_name("rule_docs.json")


def documented(code: str) -> RuleSpec | None:
    """The rule's spec from the saved documentation (no check function), or None."""
    try:
        saved = json.loads(DOCS_FILE.read_text(encoding="utf-8")).get(code)
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or code not in BY_CODE:
        return None
    fix = Remediation.from_json(saved["fix"])
    return RuleSpec(BY_CODE[code], fix, str(saved["details"]), None)


def current_docs() -> dict[str, Any]:
    """What rule_docs.json must hold, read from the registered rules."""
    from ddp_doctor.registry import all_rules

    return {spec.code: {"details": spec.details, "fix": spec.fix.to_json()} for spec in all_rules()}


def render_docs(docs: dict[str, Any]) -> str:
    return json.dumps(docs, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
