"""Jupyter notebooks as scripts: code cells in order, each finding placed at its cell and line.

A notebook runs its cells top to bottom in one process, so the rules read the code cells
joined into one script (one blank line between cells). IPython magics and shell escapes
(`%matplotlib`, `!pip`) become comments, so line numbers stay true. A finding's location is
then given as ruff gives it: `nb.ipynb:cell 3:2:5` (path, cell, line in the cell, column);
the path stays the file's own (JSON and SARIF consumers open it), the cell is in the location.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, replace

from ddp_doctor.model import Finding, Location

NOTEBOOK_SUFFIX = ".ipynb"


@dataclass(frozen=True)
class NotebookScript:
    source: str
    starts: tuple[int, ...]  # the script line where each code cell begins
    numbers: tuple[int, ...]  # each code cell's number among all the notebook's cells (1-based)


def notebook_script(text: str) -> NotebookScript | str:
    """The code cells as one script, or why the notebook cannot be read."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        return f"not a notebook: invalid JSON ({error})"
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        return "not a notebook: no list of cells"
    lines: list[str] = []
    starts: list[int] = []
    numbers: list[int] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text_of_cell = "".join(source) if isinstance(source, list) else str(source)
        starts.append(len(lines) + 1)
        numbers.append(number)
        lines.extend(_without_magics(text_of_cell.splitlines()))
        lines.append("")
    return NotebookScript("\n".join(lines) + "\n", tuple(starts), tuple(numbers))


def _without_magics(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            line = line[: len(line) - len(stripped)] + "# " + stripped
        out.append(line)
    return out


def in_cells(findings: list[Finding], path: str, script: NotebookScript) -> list[Finding]:
    """The findings on this notebook placed at cell and line."""
    return [_placed(f, path, script) for f in findings]


def _placed(finding: Finding, path: str, script: NotebookScript) -> Finding:
    where = finding.location
    if where is None or where.path != path or not where.line or not script.starts:
        return finding
    index = max(bisect.bisect_right(script.starts, where.line) - 1, 0)
    line = where.line - script.starts[index] + 1
    cell = script.numbers[index]
    return replace(finding, location=Location(path, line, where.column, cell))
