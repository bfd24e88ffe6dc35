"""A Report to and from the JSON document that `--format json` prints and `diagnose` reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddp_doctor.codec import CodecError, from_jsonable, to_jsonable
from ddp_doctor.facts.folding import (
    SIZED_FOR_GROUPS,
    SIZED_FOR_NODES,
    SIZED_FOR_RANKS_PER_NODE,
    fold_probes,
    folded_report_bytes,
    job_facts_of,
    job_to_json,
    unfold_probes,
)
from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import FACT_TYPES, FactSet
from ddp_doctor.inputs import TooLarge, describe_size, read_capped
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus, Rejudged, Report
from ddp_doctor.readings.expected_busbw import bandwidth_tables

SCHEMA_VERSION = 1
# What the doctor itself writes for the largest cluster it is sized for (folding.py's size
# model: 1,024 nodes x 8 ranks, 128 groups: ~5 MiB), and never less than the 4 MiB an unfolded
# 512-rank report fits in. A report costs up to ~25x its size in memory (JSON, then facts).
MIB = 1024 * 1024
MAX_REPORT_BYTES = MIB * max(
    4,
    -(-folded_report_bytes(SIZED_FOR_NODES, SIZED_FOR_RANKS_PER_NODE, SIZED_FOR_GROUPS) // MIB),
)  # whole MiB, rounded up: 5 MiB
# A real report nests about 8 deep; the renderers and the codec recurse, so 64 is the cap.
MAX_NESTING = 64
OUTPUT_TAIL_CHARS = 64 * 1024  # what `run` keeps of the job's output (launch.OUTPUT_TAIL_BYTES)


class ReportError(ValueError):
    """The file is not a ddp-doctor JSON report this version can read."""


def report_to_json(report: Report) -> dict[str, Any]:
    document = {
        "schema_version": SCHEMA_VERSION,
        "tool_version": report.tool_version,
        "created": report.created,
        "command": report.command,
        "subject": report.subject,
        "probes": fold_probes([probe_to_json(result) for result in report.probes]),
        "findings": [finding.to_json() for finding in report.findings],
    }
    if report.rejudged is not None:
        document["rejudged"] = report.rejudged.to_json()
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
        "facts": job_to_json(result.facts)
        if isinstance(result.facts, JobFacts)
        else to_jsonable(result.facts),
        "error": result.error,
    }


def load_report(path: Path) -> Report:
    try:
        text = read_capped(path, MAX_REPORT_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise ReportError(f"{path} is not a text file") from None
    except TooLarge as error:
        raise ReportError(
            f"{path} is {describe_size(error.size)}, over the {describe_size(error.limit)} a "
            "ddp-doctor report can be; give the JSON report `run --format json` wrote"
        ) from None
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReportError(
            f"{path} is not valid JSON ({error.msg} at line {error.lineno})"
        ) from None
    except RecursionError:
        raise ReportError(f"{path} is nested too deeply to be a ddp-doctor report") from None
    except ValueError as error:  # an integer past Python's 4,300 digits
        raise ReportError(f"{path} is not a ddp-doctor report ({str(error)[:80]})") from None
    return report_from_json(data)


def report_from_json(data: Any) -> Report:
    if not isinstance(data, Mapping) or "schema_version" not in data:
        raise ReportError("not a ddp-doctor report: no schema_version")
    if nesting(data) > MAX_NESTING:
        raise ReportError(f"nested deeper than {MAX_NESTING} levels: not a ddp-doctor report")
    too_big = first_oversized_number(data)
    if too_big is not None:
        raise ReportError(f"a number past 64 bits ({too_big}): not a ddp-doctor report")
    count = first_count_past_bound(data)
    if count is not None:
        raise ReportError(f"{count}: not a report of a real job")
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
            probes=tuple(probe_from_json(item) for item in unfold_probes(probes)),
            findings=tuple(Finding.from_json(item) for item in findings),
            command=_optional_text(data.get("command")),
            subject=_optional_text(data.get("subject")),
            rejudged=_rejudged(data.get("rejudged")),
        )
    except (CodecError, KeyError, TypeError, ValueError) as error:  # RunsError is a ValueError
        raise ReportError(f"malformed report: {_describe(error)}") from None


def probe_from_json(data: Any) -> ProbeResult:
    if not isinstance(data, Mapping):
        raise CodecError("a probe entry is not an object")
    name = str(data["probe"])
    status = ProbeStatus(data["status"])
    facts_type = FACT_TYPES.get(name)
    raw = data.get("facts")
    if facts_type is JobFacts and isinstance(raw, dict) and "rank_groups" in raw:
        facts = job_facts_of(raw, lambda cls, value: from_jsonable(cls, value, name))
    else:
        facts = from_jsonable(facts_type, raw, name) if facts_type and raw is not None else None
    duration = data.get("duration_s", 0.0)
    if not isinstance(duration, (int, float)):
        raise CodecError(f"{name}: duration_s is not a number")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise CodecError(f"{name}: error is not a string")
    if isinstance(facts, JobFacts) and len(facts.output_tail) > OUTPUT_TAIL_CHARS:
        facts = replace(facts, output_tail=facts.output_tail[-OUTPUT_TAIL_CHARS:])
    return ProbeResult(name, status, facts, float(duration), error)


def _rejudged(value: Any) -> Rejudged | None:
    if not isinstance(value, Mapping):
        return None
    return Rejudged(
        tool_version=str(value.get("tool_version", "unknown")),
        created=str(value.get("created", "")),
        command=_optional_text(value.get("command")),
    )


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def nesting(value: Any) -> int:
    """How deeply lists and objects nest in a JSON value (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def first_oversized_number(value: Any) -> str | None:
    """The first integer outside 64 bits in a JSON value, shortened (no fact is that large, and
    one of 4,300 digits cannot even be printed)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif type(item) is int and not -(1 << 63) <= item < 1 << 64:
            return f"{item.bit_length()} bits"
    return None


# Counts that size something (a list of nodes, of ranks, of devices), each checked before any
# reading or rule iterates over it: a 10 KB report with nnodes = 10^12 once built that range.
MAX_NODES = 100_000  # as a SLURM host list
MAX_RANKS = 10_000_000
COUNT_BOUNDS = {
    "nnodes": MAX_NODES, "min_nodes": MAX_NODES, "node_rank": MAX_NODES, "group_rank": MAX_NODES,
    "nproc": MAX_RANKS, "expected_ranks": MAX_RANKS, "world_size": MAX_RANKS,
    "num_replicas": MAX_RANKS, "rank": MAX_RANKS, "local_rank": MAX_RANKS,
    "device_count": MAX_NODES, "cpu_count": MAX_RANKS, "restarts": MAX_NODES,
}  # fmt: skip


def first_count_past_bound(value: Any) -> str | None:
    """The first count (a field of COUNT_BOUNDS) outside [-1, its bound], as `name = value`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for key, child in item.items():
                bound = COUNT_BOUNDS.get(key)
                if bound is not None and type(child) is int and not -1 <= child <= bound:
                    return f"{key} = {child} is past any real job (at most {bound:,})"
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _describe(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing field {error.args[0]!r}"
    return str(error)
