"""The bandwidth sweep as a picture: a Mermaid xychart-beta block in the Markdown report with
the table kept beside it, a sparkline in the terminal's table, and each node's busbw as bars
for a multi-node run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddp_doctor.judge import judge
from ddp_doctor.model import Report
from ddp_doctor.render import render
from ddp_doctor.render.charts import BLOCKS, node_spread_chart, size_label, sparkline, sweep_chart
from ddp_doctor.report_io import load_report

ROOT = Path(__file__).resolve().parent.parent
A100 = ROOT / "fixtures" / "bandwidth" / "a100-sxm-8x.json"
MERMAID = re.compile(r"```mermaid\n(.*?)\n```", re.S)


def rendered(path: Path, fmt: str) -> str:
    saved = load_report(path)
    return render(
        Report(saved.tool_version, saved.created, saved.probes, tuple(judge(saved.probes))), fmt
    )


def test_sparkline_spans_lowest_to_highest() -> None:
    assert (
        sparkline([1.0, 2.0, 4.0, 8.0])
        == BLOCKS[0] + sparkline([1.0, 2.0, 4.0, 8.0])[1:3] + BLOCKS[-1]
    )
    assert sparkline([3.0, 3.0]) == BLOCKS[3] * 2 and sparkline([]) == ""


def test_size_labels() -> None:
    assert [size_label(s) for s in (1000, 1024, 64 << 20, 1 << 30)] == [
        "1000 B",
        "1 KiB",
        "64 MiB",
        "1 GiB",
    ]


def test_the_markdown_report_charts_the_sweep_and_keeps_the_table() -> None:
    text = rendered(A100, "markdown")
    (chart,) = MERMAID.findall(text)
    assert chart.startswith("xychart-beta\n")
    lines = [line.strip() for line in chart.splitlines()]
    measured, expected = (line for line in lines if line.startswith("line ["))
    saved = load_report(A100)
    job = next(r.facts for r in saved.probes if r.probe == "job")
    sizes = [row.size_bytes for row in job.bandwidth if row.op == "all_reduce"]
    assert measured.count(",") == expected.count(",") == len(sizes) - 1
    assert len(set(expected.removeprefix("line [").rstrip("]").split(", "))) == 1  # the flat band
    assert "busbw (GB/s)" in text.split("```mermaid")[1].split("### ")[0]  # the table beside it


def test_the_terminal_table_has_a_sparkline() -> None:
    table = rendered(A100, "table").splitlines()
    line = next(text for text in table if text.startswith("busbw by size:"))
    shape = line.split(": ", 1)[1]
    assert shape[0] == BLOCKS[0] and shape[-1] == BLOCKS[-1] and set(shape) <= set(BLOCKS)


def test_no_rows_no_chart() -> None:
    assert sweep_chart({"op": "all_reduce", "ranks": 2, "rows": []}) == []


def test_labels_cannot_break_out_of_the_chart() -> None:
    table = {"op": 'x"]\n```\n<b>', "ranks": 2, "expected_gbps": None,
             "rows": [{"size_bytes": 1024, "busbw_gbps": 1.0}]}  # fmt: skip
    chart = "\n".join(sweep_chart(table))
    assert (
        chart.count("```") == 2
        and "<b>" not in chart
        and '"]' not in chart.split("title")[1].split("\n")[0][:-1]
    )


@pytest.mark.parametrize("nodes", [1, 3])
def test_each_nodes_busbw_as_bars(nodes: int) -> None:
    rows = [{"size_bytes": 1 << 20, "busbw_gbps": 1.0}, {"size_bytes": 64 << 20, "busbw_gbps": 9.0}]
    job = {"node_bandwidth": [{"node_rank": n, "rows": rows} for n in range(nodes)]}
    chart = node_spread_chart(job)
    if nodes == 1:
        assert chart == []
    else:
        assert any(line.strip() == "bar [9, 9, 9]" for line in chart)
        assert '"node 2"' in "\n".join(chart) and "64 MiB" in "\n".join(chart)
