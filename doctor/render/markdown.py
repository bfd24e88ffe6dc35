"""A report ready to paste into a GitHub issue: findings with fixes, facts in <details>."""

from __future__ import annotations

import json
from typing import Any

from .job_tables import render_job_text


def render_markdown(document: dict[str, Any]) -> str:
    findings = document["findings"]
    lines = [
        "## ddp-doctor report",
        "",
        f"ddp-doctor {document['tool_version']}, {document['created']}: {_counts(findings)}.",
        "",
    ]
    lines += _findings_table(findings) if findings else ["No problems found.", ""]
    if document["probes"]:
        lines += ["### Probes", "", "| probe | status | time | note |", "|---|---|---|---|"]
        for probe in document["probes"]:
            lines.append(
                f"| {probe['probe']} | {probe['status']} | {probe['duration_s']:.2f} s "
                f"| {_cell(probe['error'] or '')} |"
            )
        lines.append("")
        job = next(
            (p["facts"] for p in document["probes"] if p["probe"] == "job" and p["facts"]), None
        )
        if job is not None:
            lines += ["### Job", "", "```", render_job_text(job), "```", ""]
        cluster = _facts_of(document, "cluster")
        if cluster is not None:
            from .cluster_table import render_cluster_text  # multi-node runs only

            text = render_cluster_text(cluster, job, _facts_of(document, "plan"))
            lines += ["### Cluster", "", "```", text, "```", ""]
        dataparallel = next(
            (p["facts"] for p in document["probes"] if p["probe"] == "dataparallel" and p["facts"]),
            None,
        )
        if dataparallel is not None:
            from .dataparallel_table import render_dataparallel_text  # `check` never needs it

            text = render_dataparallel_text(dataparallel)
            lines += ["### DataParallel", "", "```", text, "```", ""]
        for probe in document["probes"]:
            if probe["facts"] is not None:
                lines += _details(f"{probe['probe']} facts", probe["facts"])
    return "\n".join(lines).rstrip() + "\n"


def _facts_of(document: dict[str, Any], probe: str) -> Any:
    return next(
        (p["facts"] for p in document["probes"] if p["probe"] == probe and p["facts"]), None
    )


def _findings_table(findings: list[dict[str, Any]]) -> list[str]:
    lines = ["| severity | code | name | where | message | fix |", "|---|---|---|---|---|---|"]
    for f in findings:
        fix = f["fix"] or {"text": "", "commands": []}
        commands = "<br>".join(f"`{_cell(c)}`" for c in fix["commands"])
        fix_text = _cell(fix["text"]) + (f"<br>{commands}" if commands else "")
        lines.append(
            f"| {f['severity']} | {f['code']} | {f['name']} | {_cell(_where(f['location']))} "
            f"| {_cell(f['message'])} | {fix_text} |"
        )
    return [*lines, ""]


def _details(title: str, facts: Any) -> list[str]:
    body = json.dumps(facts, indent=2, ensure_ascii=False)
    return [
        "<details>",
        f"<summary>{title}</summary>",
        "",
        "```json",
        body,
        "```",
        "",
        "</details>",
        "",
    ]


def _where(location: dict[str, Any] | None) -> str:
    if not location:
        return ""
    return ":".join(str(p) for p in (location["path"], location["line"], location["column"]) if p)


def _counts(findings: list[dict[str, Any]]) -> str:
    words = [
        f"{sum(f['severity'] == s for f in findings)} {s}" for s in ("error", "warning", "info")
    ]
    return ", ".join(words)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")
