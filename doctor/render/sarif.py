"""SARIF 2.1.0 for GitHub code scanning (upload with github/codeql-action/upload-sarif)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ddp_doctor import strict_json
from ddp_doctor.model import Finding, Report, Severity
from ddp_doctor.registry import RuleSpec, lookup

if TYPE_CHECKING:
    from ddp_doctor.script.fixes import FindingFix

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def render_sarif(report: Report, fixes: Mapping[int, FindingFix] | None = None) -> str:
    """`fixes`, by index of the finding in the report: each becomes the result's `fixes`."""
    document = sarif_document(report, fixes or {})
    return strict_json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def sarif_document(report: Report, fixes: Mapping[int, FindingFix] | None = None) -> dict[str, Any]:
    codes = sorted({f.code for f in report.findings})
    specs = [spec for code in codes if (spec := lookup(code)) is not None]
    index = {spec.code: number for number, spec in enumerate(specs)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": _driver(report.tool_version, specs)},
                "results": [
                    _result(f, index, (fixes or {}).get(number))
                    for number, f in enumerate(report.findings)
                ],
            }
        ],
    }


def _driver(version: str, specs: list[RuleSpec]) -> dict[str, Any]:
    driver: dict[str, Any] = {"name": "ddp-doctor", "version": version}
    home = _home_page()
    if home:  # optional in SARIF: better none than a page that does not exist
        driver["informationUri"] = home
    driver["rules"] = [_rule(spec) for spec in specs]
    return driver


def _home_page() -> str | None:
    """The package's own home page as its metadata declares it ([project.urls] Homepage)."""
    from importlib import metadata

    try:
        info = metadata.metadata("ddp-doctor")
    except metadata.PackageNotFoundError:
        return None
    for entry in info.get_all("Project-URL") or ():
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("homepage", "home", "source", "repository"):
            return url.strip() or None
    home = info.get("Home-page")
    return home if home and home.upper() != "UNKNOWN" else None


def _rule(spec: RuleSpec) -> dict[str, Any]:
    return {
        "id": spec.code,
        "name": spec.name,
        "shortDescription": {"text": spec.summary},
        "fullDescription": {"text": spec.doc},
        "help": {"text": spec.fix.text},
        "defaultConfiguration": {"level": _LEVELS[spec.severity]},
    }


def _result(
    finding: Finding, index: dict[str, int], fix: FindingFix | None = None
) -> dict[str, Any]:
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
        place: dict[str, Any] = {
            "physicalLocation": {
                "artifactLocation": {"uri": _uri(where.path)},
                "region": region,
            }
        }
        if where.cell is not None:  # a notebook: the region's line counts within this cell
            place["properties"] = {"cell": where.cell}
        result["locations"] = [place]
    related = finding.evidence.get("related")
    places = [p for p in related if isinstance(p, dict)] if isinstance(related, list) else []
    if places:
        result["relatedLocations"] = [
            _related(number, place) for number, place in enumerate(places)
        ]
    if fix is not None:
        result["fixes"] = [_fix(fix)]
    return result


# What each role of a related place (ddp_doctor.script.hits) says in a SARIF viewer.
_ROLE_TEXT = {
    "cause": "the cause, in the helper module",
    "placement": "where the helper places the GPU with it",
    "process-group": "the init_process_group call it runs after",
}


def _related(number: int, spot: dict[str, Any]) -> dict[str, Any]:
    """Another place the finding names: the cause, when the finding is reported on the entry
    point that reaches it; the helper that uses what the entry point hands it; the init."""
    region: dict[str, Any] = {"startLine": int(spot.get("line") or 1)}
    if spot.get("column"):
        region["startColumn"] = int(spot["column"])
    text = _ROLE_TEXT.get(str(spot.get("role")), "a related place")
    return {
        "id": number,
        "physicalLocation": {
            "artifactLocation": {"uri": _uri(str(spot.get("path", "")))},
            "region": region,
        },
        "message": {"text": text},
    }


def _fix(fix: FindingFix) -> dict[str, Any]:
    """SARIF's fix object: whole-line regions (startLine..endLine) replaced, or an empty
    region at a line's start where lines are inserted before it."""
    replacements = []
    for change in fix.replacements:
        if change.end_line < change.start_line:
            region = {
                "startLine": change.start_line,
                "startColumn": 1,
                "endLine": change.start_line,
                "endColumn": 1,
            }
        else:
            region = {
                "startLine": change.start_line,
                "startColumn": 1,
                "endLine": change.end_line + 1,
                "endColumn": 1,
            }
        replacements.append({"deletedRegion": region, "insertedContent": {"text": change.text}})
    kind = "safe" if fix.safe else "unsafe (--unsafe-fixes)"
    return {
        "description": {"text": f"ddp-doctor check --fix: {kind}"},
        "artifactChanges": [
            {"artifactLocation": {"uri": _uri(fix.path)}, "replacements": replacements}
        ],
    }


def _uri(path: str) -> str:
    """A relative path stays relative (GitHub resolves it against the checkout)."""
    if os.path.isabs(path):
        return Path(path).as_uri()
    return quote(path.replace(os.sep, "/"), errors="surrogateescape")  # a non-UTF-8 name: %XX
