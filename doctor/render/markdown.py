"""A report ready to paste into a GitHub issue: what ran where, the findings with their evidence
and fixes, the job's tables once, and the facts folded in <details>, compact."""

from __future__ import annotations

import re
from typing import Any

from ddp_doctor.render.facts_text import compact_facts, evidence_line, header_rows

OUTPUT_LINES = 40  # of a failed job's output, folded
FOLDED_SHARE = 0.2  # of the report's length, at most, for the folded facts
SECTION_ORDER = ("env", "nvml", "host", "torch", "python", "plan", "dataparallel", "collect_env")


def render_markdown(document: dict[str, Any]) -> str:
    findings = document["findings"]
    probes = {probe["probe"]: probe for probe in document["probes"]}
    lines = ["## ddp-doctor report", "", "| | |", "|---|---|"]
    lines += [f"| {name} | {_header_cell(value)} |" for name, value in header_rows(document)]
    lines += ["", f"**{_counts(findings)}.**", ""]
    lines += _findings_table(findings) if findings else [_nothing_found(document), ""]
    if probes:
        lines += _probe_table(document["probes"])
        lines += _job(probes.get("job"), document.get("bandwidth"))
        lines += _cluster(document)
        lines += _trace(probes.get("trace"))
        lines += _attach(probes.get("attach"))
        lines += _dataparallel(probes.get("dataparallel"))
        lines += _folded_facts(document["probes"], sum(len(line) + 1 for line in lines))
    return "\n".join(lines).rstrip() + "\n"


def _nothing_found(document: dict[str, Any]) -> str:
    subject = document.get("subject")
    return f"No known failure pattern in {subject}." if subject else "No problems found."


def _cluster(document: dict[str, Any]) -> list[str]:
    cluster = _facts_of(document, "cluster")
    if cluster is None:
        return []
    from ddp_doctor.render.cluster_table import render_cluster_text  # multi-node runs only

    job, plan = _facts_of(document, "job"), _facts_of(document, "plan")
    return ["### Cluster", "", "```", render_cluster_text(cluster, job, plan), "```", ""]


def _facts_of(document: dict[str, Any], probe: str) -> Any:
    return next(
        (p["facts"] for p in document["probes"] if p["probe"] == probe and p["facts"]), None
    )


def _findings_table(findings: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| severity | code | name | where | message | evidence | fix |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in findings:
        fix = f["fix"] or {"text": "", "commands": []}
        commands = "<br>".join(_code_cell(c) for c in fix["commands"])
        fix_text = _cell(fix["text"]) + (f"<br>{commands}" if commands else "")
        evidence = evidence_line(f.get("evidence") or {})
        lines.append(
            f"| {f['severity']} | {f['code']} | {f['name']} | {_cell(_where(f['location']))} "
            f"| {_cell(f['message'])} | {_code_cell(evidence)} | {fix_text} |"
        )
    return [*lines, ""]


def _probe_table(probes: list[dict[str, Any]]) -> list[str]:
    lines = ["### Probes", "", "| probe | status | time | note |", "|---|---|---|---|"]
    for probe in probes:
        lines.append(
            f"| {probe['probe']} | {probe['status']} | {probe['duration_s']:.2f} s "
            f"| {_cell(probe['error'] or '')} |"
        )
    return [*lines, ""]


def _job(probe: dict[str, Any] | None, bandwidth: list[dict[str, Any]] | None) -> list[str]:
    if not probe or not probe.get("facts"):
        return []
    from ddp_doctor.render.charts import node_spread_chart, sweep_chart
    from ddp_doctor.render.job_tables import render_job_text

    charts = [line for table in bandwidth or [] for line in sweep_chart(table)]
    charts += node_spread_chart(probe["facts"])
    return ["### Job", "", *charts, "```", render_job_text(probe["facts"], bandwidth), "```", ""]


def _trace(probe: dict[str, Any] | None) -> list[str]:
    if not probe or not probe.get("facts"):
        return []
    from ddp_doctor.render.trace_tables import render_trace_text  # only `trace` reports need it

    return ["### Traced run", "", "```", render_trace_text(probe["facts"]), "```", ""]


def _attach(probe: dict[str, Any] | None) -> list[str]:
    if not probe or not probe.get("facts"):
        return []
    from ddp_doctor.render.attach_table import render_attach_text, threads_markdown

    text = render_attach_text(probe["facts"])
    return ["### Attached job", "", "```", text, "```", "", *threads_markdown(probe["facts"])]


def _dataparallel(probe: dict[str, Any] | None) -> list[str]:
    if not probe or not probe.get("facts"):
        return []
    from ddp_doctor.render.dataparallel_table import render_dataparallel_text

    text = render_dataparallel_text(probe["facts"])
    return ["### DataParallel", "", "```", text, "```", ""]


def _folded_facts(probes: list[dict[str, Any]], visible_chars: int) -> list[str]:
    """The facts, compact and folded, within FOLDED_SHARE of the whole report: most useful
    first (a failed job's output, then the variables, GPUs, host, torch, Python); what does not
    fit is counted and named, and `--format json` has all of it."""
    budget = int(visible_chars * FOLDED_SHARE / (1 - FOLDED_SHARE))
    lines: list[str] = []
    left_out: list[str] = []
    for title, body in _fact_sections(probes):
        body_lines = body.splitlines()
        note = "... 999999 more lines: --format json has them"
        wrapper = sum(len(line) + 1 for line in _details(title, note, "text"))
        full = bool(left_out) and left_out[-1].startswith("all ")
        kept, dropped = ([], len(body_lines)) if full else _fit(body_lines, budget - wrapper)
        if not kept:
            left_out.append(f"all {_lines(len(body_lines))} of {title}")
            continue
        if dropped:
            kept.append(f"... {_lines(dropped, 'more ')}: --format json has them")
            left_out.append(f"{_lines(dropped, 'more ')} of {title}")
        block = _details(title, "\n".join(kept), "text")
        budget -= sum(len(line) + 1 for line in block)
        lines += block
    if left_out:
        lines += [f"Left out for length: {', '.join(left_out)}; the JSON report has them.", ""]
    return lines


def _lines(count: int, more: str = "") -> str:
    return f"{count} {more}line{'s' if count != 1 else ''}"


def _fact_sections(probes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    by_name = {p["probe"]: p.get("facts") or {} for p in probes}
    sections = []
    for name, what in (("job", "job output"), ("trace", "output of the traced run")):
        run = by_name.get(name, {})
        failed = run.get("timed_out") or run.get("exit_code") not in (None, 0)
        if failed and (run.get("output_tail") or "").strip():
            tail = run["output_tail"].rstrip().splitlines()[-OUTPUT_LINES:]
            sections.append((f"{what} (last {len(tail)} lines)", "\n".join(tail)))
    for name in SECTION_ORDER:
        facts = by_name.get(name) or {}
        if name == "collect_env":  # lscpu's every field is in the JSON; its gist is above
            facts = {key: value for key, value in facts.items() if key != "lscpu"}
        body = compact_facts(facts)
        if body:
            sections.append((f"{name} facts", body))
    return sections


def _fit(lines: list[str], budget: int) -> tuple[list[str], int]:
    kept, used = [], 0
    for line in lines:
        used += len(line) + 1
        if used > budget:
            break
        kept.append(line)
    return kept, len(lines) - len(kept)


def fence_for(body: str) -> str:
    """A code fence longer than any run of backticks in the body, so no line of it (a job's
    output holding ```` ```` ````) can close the block and turn the rest into live Markdown."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _details(title: str, body: str, language: str) -> list[str]:
    fence = fence_for(body)
    return [
        "<details>",
        f"<summary>{title}</summary>",
        "",
        fence + language,
        body,
        fence,
        "",
        "</details>",
        "",
    ]


def _where(location: dict[str, Any] | None) -> str:
    if not location:
        return ""
    cell = location.get("cell")
    parts = (location["path"], cell and f"cell {cell}", location["line"], location["column"])
    return ":".join(str(p) for p in parts if p)


def _counts(findings: list[dict[str, Any]]) -> str:
    counts = {s: sum(f["severity"] == s for f in findings) for s in ("error", "warning", "info")}
    words = [f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in counts.items()]
    return ", ".join(words)


# In a table cell, as GitHub renders it: a "|" ends the cell, HTML is live (a "</details>" or
# an <img>), "@name" notifies someone, a backtick starts code. Each is written as an entity or
# escaped, so the cell shows the text and does nothing else.
_CELL_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "@": "&#64;", "`": "\\`"}
_CELL_SPECIALS = re.compile("[&<>|@`]")


def _cell(text: str) -> str:
    return _inline(str(text).strip())


def _inline(text: str) -> str:
    """Cell text on one line, every special character inert."""
    one_line = re.sub(r"\s+", " ", text)
    return _CELL_SPECIALS.sub(lambda m: _CELL_ESCAPES[m.group(0)], one_line)


def _header_cell(value: str) -> str:
    """A header value: its code spans (between backticks, header_rows' own) as code, the rest
    as plain cell text."""
    parts = value.split("`")
    return "".join(_code_cell(p) if i % 2 else _inline(p) for i, p in enumerate(parts))


def _code_cell(text: str) -> str:
    """Text in a code span inside a cell: HTML and mentions are inert there; "|" still ends
    the cell and a backtick would end the span."""
    if not text:
        return ""
    return "`" + " ".join(str(text).split()).replace("|", "\\|").replace("`", "'") + "`"
