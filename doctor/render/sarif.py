"""SARIF 2.1.0 for GitHub code scanning (upload with github/codeql-action/upload-sarif)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ddp_doctor import strict_json
from ddp_doctor.model import Finding, Report, Severity
from ddp_doctor.registry import RuleSpec, lookup

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/ddp-doctor/"
_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def render_sarif(report: Report) -> str:
    return strict_json.dumps(sarif_document(report), indent=2, ensure_ascii=False) + "\n"


def sarif_document(report: Report) -> dict[str, Any]:
    codes = sorted({f.code for f in report.findings})
    specs = [spec for code in codes if (spec := lookup(code)) is not None]
    index = {spec.code: number for number, spec in enumerate(specs)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ddp-doctor",
                        "version": report.tool_version,
                        "informationUri": INFORMATION_URI,
                        "rules": [_rule(spec) for spec in specs],
                    }
                },
                "results": [_result(f, index) for f in report.findings],
            }
        ],
    }


def _rule(spec: RuleSpec) -> dict[str, Any]:
    return {
        "id": spec.code,
        "name": spec.name,
        "shortDescription": {"text": spec.summary},
        "fullDescription": {"text": spec.doc},
        "help": {"text": spec.fix.text},
        "defaultConfiguration": {"level": _LEVELS[spec.severity]},
    }


def _result(finding: Finding, index: dict[str, int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": _LEVELS[finding.severity],
        "message": {"text": finding.message},
    }
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    where = finding.location
    if where is not None:
        region = {"startLine": where.line or 1}
        if where.column:
            region["startColumn"] = where.column
        result["locations"] = [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(where.path)},
                    "region": region,
                }
            }
        ]
    return result


def _uri(path: str) -> str:
    """A relative path stays relative (GitHub resolves it against the checkout)."""
    if os.path.isabs(path):
        return Path(path).as_uri()
    return quote(path.replace(os.sep, "/"), errors="surrogateescape")  # a non-UTF-8 name: %XX
