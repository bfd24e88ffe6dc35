"""A Report to and from the JSON document that `--format json` prints and `diagnose` reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .codec import CodecError, from_jsonable, to_jsonable
from .expected_busbw import bandwidth_tables
from .facts import FACT_TYPES, FactSet
from .model import Finding, ProbeResult, ProbeStatus, Report

SCHEMA_VERSION = 1


class ReportError(ValueError):
    """The file is not a ddp-doctor JSON report this version can read."""


def report_to_json(report: Report) -> dict[str, Any]:
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool_version": report.tool_version,
        "created": report.created,
        "command": report.command,
        "subject": report.subject,
        "probes": [probe_to_json(result) for result in report.probes],
        "findings": [finding.to_json() for finding in report.findings],
    }
    # Derived from the facts on every write (diagnose recomputes it), never read back.
    tables = bandwidth_tables(FactSet.of(report.probes))
    if tables:
        document["bandwidth"] = tables
    return document


def probe_to_json(result: ProbeResult) -> dict[str, Any]:
    return {
        "probe": result.probe,
        "status": result.status.value,
        "duration_s": result.duration_s,
        "facts": to_jsonable(result.facts),
        "error": result.error,
    }


def load_report(path: Path) -> Report:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReportError(f"{path} is not a text file") from None
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportError(
            f"{path} is not valid JSON ({error.msg} at line {error.lineno})"
        ) from None
    return report_from_json(data)


def report_from_json(data: Any) -> Report:
    if not isinstance(data, Mapping) or "schema_version" not in data:
        raise ReportError("not a ddp-doctor report: no schema_version")
    if type(data["schema_version"]) is not int or data["schema_version"] != SCHEMA_VERSION:
        raise ReportError(
            f"report schema_version {data['schema_version']!r} is not {SCHEMA_VERSION}; "
            "use the ddp-doctor version that wrote it"
        )
    probes = data.get("probes")
    findings = data.get("findings", [])
    if not isinstance(probes, list) or not isinstance(findings, list):
        raise ReportError("not a ddp-doctor report: probes and findings must be lists")
    try:
        return Report(
            tool_version=str(data.get("tool_version", "unknown")),
            created=str(data.get("created", "")),
            probes=tuple(probe_from_json(item) for item in probes),
            findings=tuple(Finding.from_json(item) for item in findings),
            command=_optional_text(data.get("command")),
            subject=_optional_text(data.get("subject")),
        )
    except (CodecError, KeyError, TypeError, ValueError) as error:
        raise ReportError(f"malformed report: {_describe(error)}") from None


def probe_from_json(data: Any) -> ProbeResult:
    if not isinstance(data, Mapping):
        raise CodecError("a probe entry is not an object")
    name = str(data["probe"])
    status = ProbeStatus(data["status"])
    facts_type = FACT_TYPES.get(name)
    raw = data.get("facts")
    facts = from_jsonable(facts_type, raw, name) if facts_type and raw is not None else None
    duration = data.get("duration_s", 0.0)
    if not isinstance(duration, (int, float)):
        raise CodecError(f"{name}: duration_s is not a number")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise CodecError(f"{name}: error is not a string")
    return ProbeResult(name, status, facts, float(duration), error)


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _describe(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing field {error.args[0]!r}"
    return str(error)
