"""The one table layout of every text output (the terminal report and the Markdown report's
code blocks): `plain_table`. Hand-written rather than tabulate: one style for every table, and
no 25 ms import for `rules`, `explain` and `logs`.

The style: a header line, then one line per row; columns two spaces apart, each as wide as its
widest cell or header; text to the left, the columns the caller names in `right` (numbers:
counts, sizes, times, ranks) to the right, their headers with them; no trailing spaces.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

GAP = "  "


def plain_table(
    rows: Iterable[Sequence[object]], headers: Sequence[str], right: Collection[int] = ()
) -> str:
    """`right`: the indexes of the columns aligned to the right."""
    lines = [[_cell(h) for h in headers], *([_cell(c) for c in row] for row in rows)]
    count = max(len(line) for line in lines)
    widths = [
        max((len(line[i]) for line in lines if i < len(line)), default=0) for i in range(count)
    ]
    return "\n".join(
        GAP.join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in lines
    )


def _cell(value: object) -> str:
    """A cell is one line: a line break inside it would break every column below."""
    return " ".join(str(value).splitlines())


def all_columns(headers: Sequence[str]) -> range:
    """Every column to the right, as nccl-tests prints its bandwidth table."""
    return range(len(headers))
