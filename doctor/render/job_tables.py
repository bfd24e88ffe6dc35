"""The job's part of a report: stages reached per rank, and the bandwidth table as
nccl-tests prints it."""

from __future__ import annotations

from typing import Any

from ddp_doctor.facts.job import STAGES
from ddp_doctor.render.columns import all_columns, plain_table

BANDWIDTH_HEADERS = (
    "size (B)",
    "count",
    "type",
    "redop",
    "time (us)",
    "algbw (GB/s)",
    "busbw (GB/s)",
    "expected (GB/s)",
    "% of expected",
)


def stages_of(job: dict[str, Any]) -> tuple[str, ...]:
    """The job's stages: run --isolate's pair tests first where they ran."""
    ranks = [*job.get("ranks", []), *job.get("rank_groups", [])]
    isolated = any(s.get("stage") == "isolate" for r in ranks for s in r.get("stages", []))
    return ("isolate", *STAGES) if isolated else STAGES


def stage_rows(job: dict[str, Any]) -> list[list[str]]:
    """One row per rank; in a folded job (facts/folding.py) one per group of ranks alike, its
    stage times the group's medians."""
    rows = []
    for rank in [*job.get("ranks", []), *job.get("rank_groups", [])]:
        by_stage = {s["stage"]: s for s in rank.get("stages", [])}
        cells = [str(rank["rank"]) if "rank" in rank else rank["ranks"]]
        for stage in stages_of(job):
            record = by_stage.get(stage)
            if record is None:
                cells.append("-")
            elif not record.get("ended"):
                cells.append("stuck")
            elif record.get("ok"):
                cells.append(f"ok {record.get('seconds') or 0:.2f}s")
            else:
                cells.append("FAILED")
        exit_code = rank.get("exit_code")
        cells.append("" if exit_code is None else str(exit_code))
        rows.append(cells)
    return rows


def bandwidth_rows(table: dict[str, Any]) -> list[list[str]]:
    return [
        [
            str(r["size_bytes"]),
            str(r["count"]),
            r["dtype"],
            r["redop"],
            f"{r['time_us']:.1f}",
            f"{r['algbw_gbps']:.3f}",
            f"{r['busbw_gbps']:.3f}",
            "-" if r["expected_gbps"] is None else f"{r['expected_gbps']:.1f}",
            "-" if r["percent_of_expected"] is None else f"{r['percent_of_expected']:.0f}%",
        ]
        for r in table["rows"]
    ]


def bandwidth_table(rows: list[list[str]]) -> str:
    """As nccl-tests prints it: every column to the right."""
    return plain_table(rows, BANDWIDTH_HEADERS, right=all_columns(BANDWIDTH_HEADERS))


def bandwidth_title(table: dict[str, Any]) -> str:
    title = (
        f"{table['op']} bandwidth ({table['ranks']} ranks; busbw = algbw x {table['bus_factor']})"
    )
    if table["expected_gbps"] is None:
        expected = table["basis"]
    else:
        expected = f"expected {table['expected_gbps']:g} GB/s from 64 MiB: {table['basis']}"
        expected += f" [{table['source']}]" if table.get("source") else ""
    lines = [title, expected]
    if table.get("rows"):
        from ddp_doctor.render.charts import sparkline

        shape = sparkline([float(row["busbw_gbps"]) for row in table["rows"]])
        lines.append(f"busbw by size: {shape}")
    if table.get("error"):
        lines.append(f"not measured: {table['error']}")
    return "\n".join(lines)


def job_summary(job: dict[str, Any]) -> str:
    if not job.get("launched"):
        return f"job: not launched ({job.get('not_launched_reason')})"
    state = "timed-out" if job.get("timed_out") else f"exit code {job.get('exit_code')}"
    ranks = f"{job.get('nproc')} ranks"
    nnodes = job.get("nnodes") or 1
    if nnodes > 1:
        shown, world = ranks_in(job), nnodes * (job.get("nproc") or 0)
        ranks = f"{world} ranks on {nnodes} nodes"
        if shown < world:
            ranks = f"this node's {shown} of {world} ranks on {nnodes} nodes"
    sweep = f", sizes {job['sizes']} x {job.get('iters')} iters" if job.get("sizes") else ""
    return f"job: {ranks}, {job.get('backend')}{sweep}, {state}, {job.get('duration_s', 0):.1f} s"


def ranks_in(job: dict[str, Any]) -> int:
    from ddp_doctor.facts.runs import parse_ranges

    folded = sum(len(parse_ranges(g["ranks"])) for g in job.get("rank_groups") or [])
    return len(job.get("ranks") or []) + folded


def render_job_text(job: dict[str, Any], bandwidth: list[dict[str, Any]] | None = None) -> str:
    """The job's summary and stages, then one table per collective swept (`bandwidth` is the
    report's derived block, expected_busbw.bandwidth_tables)."""
    from ddp_doctor.facts.folding import fold_job

    job = fold_job(job)  # ranks alike share a row, in every format
    parts = [job_summary(job)]
    if job.get("ranks") or job.get("rank_groups"):
        headers = ("rank", *stages_of(job), "exit")
        parts.append(plain_table(stage_rows(job), headers, right=(0, len(headers) - 1)))
    for table in bandwidth or []:
        text = bandwidth_title(table)
        if table["rows"]:
            text += "\n" + bandwidth_table(bandwidth_rows(table))
        parts.append(text)
    return "\n\n".join(parts)
