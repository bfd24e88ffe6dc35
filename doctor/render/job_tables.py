"""The job's part of a report: stages reached per rank, and the bandwidth table as
nccl-tests prints it."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from ddp_doctor.jobfacts import STAGES

BANDWIDTH_HEADERS = (
    "size (B)",
    "count",
    "type",
    "redop",
    "time (us)",
    "algbw (GB/s)",
    "busbw (GB/s)",
)


def stage_rows(job: dict[str, Any]) -> list[list[str]]:
    rows = []
    for rank in job.get("ranks", []):
        by_stage = {s["stage"]: s for s in rank.get("stages", [])}
        cells = [str(rank["rank"])]
        for stage in STAGES:
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


def bandwidth_rows(job: dict[str, Any]) -> list[list[str]]:
    return [
        [
            str(r["size_bytes"]),
            str(r["count"]),
            r["dtype"],
            "sum",
            f"{r['time_us']:.1f}",
            f"{r['algbw_gbps']:.3f}",
            f"{r['busbw_gbps']:.3f}",
        ]
        for r in job.get("bandwidth", [])
    ]


def job_summary(job: dict[str, Any]) -> str:
    if not job.get("launched"):
        return f"job: not launched ({job.get('not_launched_reason')})"
    state = "timed out" if job.get("timed_out") else f"exit code {job.get('exit_code')}"
    ranks = f"{job.get('nproc')} ranks"
    nnodes = job.get("nnodes") or 1
    if nnodes > 1:
        shown, world = len(job.get("ranks") or []), nnodes * (job.get("nproc") or 0)
        ranks = f"{world} ranks on {nnodes} nodes"
        if shown < world:
            ranks = f"this node's {shown} of {world} ranks on {nnodes} nodes"
    return f"job: {ranks}, {job.get('backend')}, {state}, {job.get('duration_s', 0):.1f} s"


def render_job_text(job: dict[str, Any], fmt: str = "plain") -> str:
    parts = [job_summary(job)]
    if job.get("ranks"):
        parts.append(tabulate(stage_rows(job), headers=("rank", *STAGES, "exit"), tablefmt=fmt))
    if job.get("bandwidth"):
        ranks = len(job.get("ranks") or []) or job.get("nproc")
        title = f"all-reduce bandwidth ({ranks} ranks; busbw = algbw x 2(n-1)/n)"
        parts.append(
            title
            + "\n"
            + tabulate(
                bandwidth_rows(job),
                headers=BANDWIDTH_HEADERS,
                tablefmt=fmt,
                disable_numparse=True,
                colalign=("right",) * len(BANDWIDTH_HEADERS),
            )
        )
    return "\n\n".join(parts)
