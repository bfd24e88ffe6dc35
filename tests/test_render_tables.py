"""One table layout for every table of every text output (render/columns.plain_table)."""

from __future__ import annotations

import ast
from pathlib import Path

from ddp_doctor.render.columns import all_columns, plain_table
from ddp_doctor.render.table import render_table
from ddp_doctor.report_io import load_report

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "doctor" / "render" / "columns.py"
ALIGNERS = {"ljust", "rjust", "center"}


def test_columns_two_spaces_apart_text_left_numbers_right() -> None:
    table = plain_table(
        [["0", "ok 1.08s", "3"], ["10", "stuck", ""]], ["rank", "init", "exit"], (0, 2)
    )
    assert table.split("\n") == [
        "rank  init      exit",
        "   0  ok 1.08s     3",
        "  10  stuck",  # no trailing spaces
    ]


def test_a_line_break_in_a_cell_keeps_the_columns() -> None:
    table = plain_table([["a\nb", "x"]], ["name", "value"])
    assert table.split("\n") == ["name  value", "a b   x"]


def test_every_column_to_the_right() -> None:
    headers = ("size", "type")
    assert plain_table([["1024", "float"]], headers, all_columns(headers)) == (
        "size   type\n1024  float"
    )


def _aligners(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and node.func.attr in ALIGNERS:  # type: ignore[union-attr]
            found.append(f"{node.lineno}: .{node.func.attr}()")  # type: ignore[union-attr]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names]
            found += [f"{node.lineno}: imports {n}" for n in names if n.startswith("tabulate")]
    return found


def test_no_renderer_aligns_columns_by_hand_or_with_tabulate() -> None:
    folders = [ROOT / "doctor" / "render", ROOT / "doctor" / "commands"]
    elsewhere = {
        str(path.relative_to(ROOT)): found
        for folder in folders
        for path in folder.rglob("*.py")
        if path != HOME and (found := _aligners(path))
    }
    assert elsewhere == {}


def test_the_probe_and_rank_tables_of_a_job_report_share_the_layout() -> None:
    report = load_report(ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json")
    text = render_table(report, colour=False)
    blocks = [block.split("\n") for block in text.split("\n\n")]
    probes = next(b for b in blocks if b[0].startswith("probe"))
    ranks = next(b for b in blocks if b[0].startswith("rank"))
    for block in (probes, ranks):
        assert all(line == line.rstrip() for line in block)
    # a right-aligned column ends where its header ends, on every line
    time_end = probes[0].index("time") + len("time")
    assert all(line[:time_end].endswith(" s") for line in probes[1:])
    rank_end = ranks[0].index("rank") + len("rank")
    assert [line[:rank_end].strip() for line in ranks[1:]] == ["0", "1"]
    assert all(line[rank_end - 1].isdigit() for line in ranks[1:])
