"""Every file a user points at is read or reported (issue 20, item 4): notebooks by their code
cells with cell:line locations, explicit suffix-less files as Python when they parse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ddp_doctor.model import Finding, Location, Report, Severity
from ddp_doctor.render.github import annotation
from ddp_doctor.render.sarif import sarif_document
from ddp_doctor.script.notebook import notebook_script, without_broken_cells
from ddp_doctor.script.runner import CheckOptions, check_paths
from ddp_doctor.script.textscan import code_lines

NOTEBOOKS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "notebooks"
SCRIPT = (
    "import torch.distributed as dist\n"
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "dist.init_process_group('gloo')\n"
    "loader = DataLoader(range(9), sampler=DistributedSampler(range(9)))\n"
    "for epoch in range(3):\n"
    "    for batch in loader:\n"
    "        pass\n"
)


def places(path: Path) -> list[tuple[str, str, int | None]]:
    outcome = check_paths([str(path)], CheckOptions(select=("DDP1", "DDP9")))
    return [(f.code, f.location.path, f.location.line) for f in outcome.findings if f.location]


def test_notebook_set_epoch_missing_found_at_cell_and_line(tmp_path: Path) -> None:
    shutil.copy(NOTEBOOKS / "set_epoch_missing.ipynb", tmp_path / "nb.ipynb")
    found = [p for p in places(tmp_path) if p[0] == "DDP113"]
    assert found == [("DDP113", str(tmp_path / "nb.ipynb"), 2)]
    where = next(f.location for f in _findings(tmp_path) if f.code == "DDP113")
    assert where is not None and where.cell == 3
    assert str(where).endswith("nb.ipynb:cell 3:2:" + str(where.column))


def test_notebook_cell_kept_out_of_path_in_json_and_sarif(tmp_path: Path) -> None:
    shutil.copy(NOTEBOOKS / "set_epoch_missing.ipynb", tmp_path / "nb.ipynb")
    finding = next(f for f in _findings(tmp_path) if f.code == "DDP113")
    shown = finding.to_json()["location"]
    assert (shown["path"], shown["cell"], shown["line"]) == (str(tmp_path / "nb.ipynb"), 3, 2)
    assert Location.from_json(shown) == finding.location
    report = Report("0", "now", (), (finding,))
    place = sarif_document(report)["runs"][0]["results"][0]["locations"][0]
    assert place["physicalLocation"]["artifactLocation"]["uri"].endswith("nb.ipynb")
    assert place["properties"] == {"cell": 3}
    properties = annotation(finding).split("::")[1].split(",")
    assert properties[0].endswith("nb.ipynb") and not any(p.startswith("line=") for p in properties)


def _findings(path: Path) -> list[Finding]:
    return list(check_paths([str(path)], CheckOptions(select=("DDP1", "DDP9"))).findings)


def test_notebook_cells_in_order_magics_commented() -> None:
    text = (NOTEBOOKS / "set_epoch_missing.ipynb").read_text(encoding="utf-8")
    script = notebook_script(text)
    assert not isinstance(script, str)
    assert script.numbers == (2, 3, 5)
    assert script.source.splitlines()[0] == "# %matplotlib inline"
    assert "The epoch loop" not in script.source


def test_malformed_notebook_is_ddp911(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_text("{not json", encoding="utf-8")
    (tmp_path / "list.ipynb").write_text(json.dumps({"cells": 3}), encoding="utf-8")
    codes = {code for code, _, _ in places(tmp_path)}
    assert codes == {"DDP911"}


def test_explicit_file_without_suffix_read_as_python(tmp_path: Path) -> None:
    (tmp_path / "train").write_text(SCRIPT, encoding="utf-8")
    assert "DDP113" in {code for code, _, _ in places(tmp_path / "train")}


def test_documents_scanned_in_code_blocks_only() -> None:
    markdown = ["Do not run python -m torch.distributed.launch.", "```", "torchrun a.py", "```"]
    assert code_lines("CHANGELOG.md", markdown) == ["", "", "torchrun a.py", ""]
    rst = ["Run it::", "", "    torchrun b.py", "", "Prose about torch.distributed.launch."]
    assert code_lines("docs/run.rst", rst) == ["", "", "    torchrun b.py", "", ""]
    assert code_lines("run.sh", markdown) == markdown


def test_notebook_launcher_kernel_cells_run_once(tmp_path: Path) -> None:
    """The cells' own print runs in the kernel; the launched function's print in every worker
    (hf-notebooks' simple_nlp_example.ipynb: a first look at a batch in cell 43)."""
    shutil.copy(NOTEBOOKS / "print_under_notebook_launcher.ipynb", tmp_path / "nb.ipynb")
    outcome = check_paths([str(tmp_path)], CheckOptions(select=("ALL",)))
    found = [(f.code, f.location.cell, f.location.line) for f in outcome.findings if f.location]
    assert [place for place in found if place[0] == "DDP119"] == [("DDP119", 4, 5)]


def test_a_cell_that_is_no_python_is_left_out_and_the_others_checked(tmp_path: Path) -> None:
    """A shell line pasted into a code cell (no `!`) would stop the whole notebook from
    parsing: that cell is reported as left out (info), the other cells are judged."""
    shutil.copy(NOTEBOOKS / "snippets_with_shell_cell.ipynb", tmp_path / "nb.ipynb")
    findings = _findings(tmp_path)
    left_out = [f for f in findings if f.code == "DDP910"]
    assert [(f.location.cell, f.location.line, f.severity) for f in left_out if f.location] == [
        (6, 1, Severity.INFO)
    ]
    assert {"DDP106", "DDP113", "DDP121"} <= {f.code for f in findings}
    sampler = next(f for f in findings if f.code == "DDP113").location
    assert sampler is not None and (sampler.cell, sampler.line) == (3, 1)


def test_the_left_out_cell_keeps_every_other_location_true() -> None:
    text = (NOTEBOOKS / "snippets_with_shell_cell.ipynb").read_text(encoding="utf-8")
    script = notebook_script(text)
    assert not isinstance(script, str)
    repaired = without_broken_cells(script)
    assert len(repaired.source.splitlines()) == len(script.source.splitlines())
    assert [line for line, _ in repaired.left_out] == [script.starts[-1]]
    assert without_broken_cells(repaired) == repaired  # nothing left to leave out


def test_a_notebook_whose_cells_all_parse_is_not_touched() -> None:
    text = (NOTEBOOKS / "set_epoch_missing.ipynb").read_text(encoding="utf-8")
    script = notebook_script(text)
    assert not isinstance(script, str)
    assert without_broken_cells(script) is script


def test_an_unbound_torch_counts_as_torch_only_in_a_notebook(tmp_path: Path) -> None:
    """A notebook's kernel may hold `torch` from a cell no longer there; a .py file that uses
    torch without importing it fails at once, so nothing is assumed there."""
    cell = "torch.distributed.init_process_group(backend='nccl')\n"
    notebook = {"cells": [{"cell_type": "code", "source": [cell]}], "nbformat": 4}
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    (tmp_path / "plain.py").write_text(cell, encoding="utf-8")
    found = {(Path(str(path)).name, code) for code, path, _ in places(tmp_path)}
    assert ("nb.ipynb", "DDP106") in found
    assert not any(name == "plain.py" for name, _ in found)


def test_snippets_with_one_top_level_step_and_no_loop_need_no_set_epoch(tmp_path: Path) -> None:
    """A tutorial notebook shows a sampler and one training step, with no loop anywhere: no
    epochs are in view, so no DDP113 (the same sampler iterated per epoch is the fixture's)."""
    cells = [
        "import torch.distributed as dist\nfrom torch.utils.data import DataLoader, DistributedSampler\n"
        "dist.init_process_group('nccl')\n",
        "sampler = DistributedSampler(dataset)\nloader = DataLoader(dataset, sampler=sampler)\n"
        "print(len(loader))\n",
        "loss = criterion(model(images), target)\nloss.backward()\noptimizer.step()\n",
    ]
    notebook = {"cells": [{"cell_type": "code", "source": [c]} for c in cells], "nbformat": 4}
    (tmp_path / "nb.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    assert "DDP113" not in {code for code, _, _ in places(tmp_path)}
    looped = dict(
        notebook,
        cells=[
            *notebook["cells"][:2],
            {
                "cell_type": "code",
                "source": [
                    "for epoch in range(3):\n    loss = criterion(model(images), target)\n    loss.backward()\n"
                ],
            },
        ],
    )
    (tmp_path / "nb.ipynb").write_text(json.dumps(looped), encoding="utf-8")
    assert "DDP113" in {code for code, _, _ in places(tmp_path)}


def test_magic_and_shell_forms_are_comments_not_broken_cells(tmp_path: Path) -> None:
    """A `!` line continued by a backslash, a `%%bash` and a `%%writefile` cell are IPython's
    syntax, not broken Python (QwenLM/Qwen's fine-tuning notebook, cell 6): no DDP910; the body
    of a `%%time` cell is still the kernel's Python and judged."""
    shutil.copy(NOTEBOOKS / "magic_and_shell_forms.ipynb", tmp_path / "nb.ipynb")
    findings = _findings(tmp_path)
    assert "DDP910" not in {f.code for f in findings}
    sampler = next(f for f in findings if f.code == "DDP113").location
    assert sampler is not None and sampler.cell == 6


def test_only_the_lines_a_backslash_continues_are_commented() -> None:
    cell = {"cell_type": "code", "source": "!pip install x \\\n  y\nimport os\n%%bash\n"}
    script = notebook_script(json.dumps({"cells": [cell]}))
    assert not isinstance(script, str)
    assert script.source.splitlines()[:4] == [
        "# !pip install x \\",
        "  # y",
        "import os",
        "# %%bash",
    ]
