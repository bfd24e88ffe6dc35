"""Left-aligned text columns, as tabulate's "plain" format lays out strings, without its import
(about 25 ms of start-up: `rules`, `explain` and `logs` print tables too)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

HEADER_PADDING = 2  # tabulate pads headers by two, so a column is at least that much wider


def plain_table(rows: Iterable[Sequence[object]], headers: Sequence[str]) -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [len(header) + HEADER_PADDING for header in headers]
    for row in cells:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=False)]
    lines = [headers, *cells]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)).rstrip()
        for line in lines
    )
