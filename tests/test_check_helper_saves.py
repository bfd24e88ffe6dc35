"""DDP116 on a helper module's save that nothing in view calls: left to its callers, beside
an entry point or checked alone; a save in a file with distributed code of its own, checked
alone, is judged (the rule fixtures' sections)."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"


def _codes(path: Path) -> list[tuple[str, int, str]]:
    outcome = check_paths([str(path)], CheckOptions(select=("ALL",)))
    return [(Path(f.location.path).name, f.location.line, f.code) for f in outcome.findings]


def test_uncalled_save_helper_beside_an_entry_point_is_left_to_its_callers() -> None:
    assert _codes(PROJECTS / "save_helper_called_out_of_view") == []


def test_the_same_helper_checked_alone_is_left_to_its_callers() -> None:
    helper = PROJECTS / "save_helper_called_out_of_view" / "utils" / "checkpoint.py"
    assert _codes(helper) == []


def test_an_uncalled_save_beside_distributed_code_checked_alone_fires(tmp_path: Path) -> None:
    script = tmp_path / "engine.py"
    script.write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def train(model):\n    dist.init_process_group('nccl')\n"
        "    torch.save(model.state_dict(), 'model.pt')\n",
        encoding="utf-8",
    )
    assert ("engine.py", 7, "DDP116") in _codes(script)


def test_the_same_helper_called_unguarded_fires() -> None:
    assert ("checkpoint.py", 10, "DDP116") in _codes(PROJECTS / "save_helper_called_unguarded")
