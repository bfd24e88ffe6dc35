"""Jupyter notebooks as scripts: code cells in order, each finding placed at its cell and line.

A notebook runs its cells top to bottom in one process, so the rules read the code cells
joined into one script (one blank line between cells). IPython magics and shell escapes
(`%matplotlib`, `!pip`, with the lines a trailing backslash continues) and cells under a
cell magic whose body is no Python (`%%bash`, `%%writefile`) become comments, so line numbers
stay true. A finding's location is
then given as ruff gives it: `nb.ipynb:cell 3:2:5` (path, cell, line in the cell, column);
the path stays the file's own (JSON and SARIF consumers open it), the cell is in the location.
A code cell that is no Python at all (a shell line pasted without `!`, as tutorials do) would
stop the whole notebook from parsing: such a cell becomes comments too, and is reported as
left out, while the other cells are checked.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
import warnings
from dataclasses import dataclass, replace

from ddp_doctor.model import Finding, Location

NOTEBOOK_SUFFIX = ".ipynb"


@dataclass(frozen=True)
class NotebookScript:
    source: str
    starts: tuple[int, ...]  # the script line where each code cell begins
    numbers: tuple[int, ...]  # each code cell's number among all the notebook's cells (1-based)
    left_out: tuple[tuple[int, str], ...] = ()  # (script line, why) of cells that do not parse


def kernel_names(path: str, source: str) -> dict[str, str]:
    """Names a notebook uses as the kernel has them, though no cell of it imports them: a
    tutorial's snippets call `torch.distributed...` with the import in a cell left out, or in
    none; an unbound `torch` there can only be torch."""
    if not path.endswith(NOTEBOOK_SUFFIX) or _IMPORTS_TORCH.search(source):
        return {}
    return {"torch": "torch"}


_IMPORTS_TORCH = re.compile(r"^\s*(?:import|from)\s+torch\b", re.MULTILINE)


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


def without_broken_cells(script: NotebookScript) -> NotebookScript:
    """The script with every code cell that does not parse on its own turned into comments
    (its lines kept, so every location stays true); the same script when none is broken."""
    lines = script.source.split("\n")
    ends = [*script.starts[1:], len(lines) + 1]
    left_out: list[tuple[int, str]] = []
    for start, end in zip(script.starts, ends, strict=True):
        cell = lines[start - 1 : end - 1]
        problem = _parse_problem("\n".join(cell))
        if problem is None:
            continue
        line, message = problem
        left_out.append((start + line - 1, message))
        lines[start - 1 : end - 1] = ["# " + text if text.strip() else text for text in cell]
    if not left_out:
        return script
    return replace(script, source="\n".join(lines), left_out=tuple(left_out))


def _parse_problem(source: str) -> tuple[int, str] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source)
    except SyntaxError as error:
        return error.lineno or 1, error.msg
    except (ValueError, RecursionError, MemoryError) as error:
        return 1, type(error).__name__
    return None


def _without_magics(lines: list[str]) -> list[str]:
    """The cell with IPython's own syntax commented out: a cell magic (`%%bash`,
    `%%writefile x.py`: the cell is not Python at all), and a line magic or shell escape
    (`%cd`, `!torchrun ... \\`) with the lines its trailing backslash continues."""
    first = next((line.lstrip() for line in lines if line.strip()), "")
    if first.startswith("%%") and first[2:].split(maxsplit=1)[:1] not in _PYTHON_CELL_MAGICS:
        return [_commented(line) for line in lines]
    out = []
    continued = False
    for line in lines:
        stripped = line.lstrip()
        if continued or stripped.startswith(("%", "!")):
            continued = line.rstrip().endswith("\\")
            line = _commented(line)
        out.append(line)
    return out


# cell magics whose body is still Python the kernel runs
_PYTHON_CELL_MAGICS = (["time"], ["timeit"], ["capture"], ["prun"])


def _commented(line: str) -> str:
    stripped = line.lstrip()
    return line[: len(line) - len(stripped)] + "# " + stripped if stripped else line


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
