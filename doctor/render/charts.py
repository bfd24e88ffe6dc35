"""Pictures where people would rather look than read: the bandwidth sweep (busbw against
message size) as a Mermaid `xychart-beta` block for the Markdown report, which GitHub renders
in issues and pull requests (xychart-beta is the keyword both older and newer Mermaid
releases take; the plain `xychart` only newer ones), and as a one-line sparkline for the
terminal. The tables stay beside them: a chart is for the shape, the table for the numbers.
Read from the report's JSON form (the `bandwidth` block, the job's facts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    """One character per value, the lowest ▁ and the highest █ (all equal: all ▄)."""
    if not values:
        return ""
    low, high = min(values), max(values)
    if high <= low:
        return BLOCKS[3] * len(values)
    steps = len(BLOCKS) - 1
    return "".join(BLOCKS[round((v - low) / (high - low) * steps)] for v in values)


def size_label(size_bytes: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{size_bytes // factor} {unit}"
    return f"{size_bytes} B"


def sweep_chart(table: Mapping[str, Any]) -> list[str]:
    """A Mermaid block for one collective's sweep: measured busbw, and the expected busbw as
    a second (flat) line where the machine has an expectation; [] without rows."""
    rows = table.get("rows") or []
    if not rows:
        return []
    measured = [float(row["busbw_gbps"]) for row in rows]
    expected = table.get("expected_gbps")
    lines = [
        "```mermaid",
        "xychart-beta",
        f'    title "{_text(table.get("op"))} busbw, {_text(table.get("ranks"))} ranks"',
        '    x-axis "message size" ['
        + ", ".join(f'"{size_label(int(r["size_bytes"]))}"' for r in rows)
        + "]",
        f'    y-axis "busbw (GB/s)" 0 --> {_top(measured, expected)}',
        "    line [" + ", ".join(_number(v) for v in measured) + "]",
    ]
    if isinstance(expected, (int, float)):
        lines.append("    line [" + ", ".join(_number(float(expected)) for _ in rows) + "]")
    lines += ["```", _legend(expected), ""]
    return lines


def node_spread_chart(job: Mapping[str, Any]) -> list[str]:
    """Each node's own all-reduce busbw at its largest size, as bars: the slow node shows."""
    nodes = [n for n in job.get("node_bandwidth") or [] if n.get("rows")]
    if len(nodes) < 2:
        return []
    bars = [max(n["rows"], key=lambda r: r["size_bytes"]) for n in nodes]
    values = [float(row["busbw_gbps"]) for row in bars]
    names = ", ".join(f'"node {n["node_rank"]}"' for n in nodes)
    size = size_label(int(bars[0]["size_bytes"]))
    return [
        "```mermaid",
        "xychart-beta",
        f'    title "all_reduce busbw per node ({size})"',
        f"    x-axis [{names}]",
        f'    y-axis "busbw (GB/s)" 0 --> {_top(values, None)}',
        "    bar [" + ", ".join(_number(v) for v in values) + "]",
        "```",
        "",
    ]


def _legend(expected: object) -> str:
    if isinstance(expected, (int, float)):
        return f"_Lines: measured busbw; expected {expected:g} GB/s (the table below has both)._"
    return "_Line: measured busbw (no expectation for this machine; the table has the numbers)._"


def _top(values: Sequence[float], expected: object) -> str:
    highest = max([*values, float(expected) if isinstance(expected, (int, float)) else 0.0])
    return _number(highest * 1.1 if highest > 0 else 1.0)


def _number(value: float) -> str:
    return f"{value:.4g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.2e}"


def _text(value: object) -> str:
    """A label inside a Mermaid string: no quotes, no line breaks, no markup."""
    return "".join(c for c in str(value) if c.isalnum() or c in " _-.,()/")
