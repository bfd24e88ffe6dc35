"""DDP119 and a helper module out of view known by its family (printfamily.py): set V's rcg
calls `misc.init_distributed_mode(args)` and `misc.MetricLogger` of util/misc.py (MAE's copy
of torchvision's references utils.py, not in the set), whose init_distributed_mode ends
with setup_for_distributed(args.rank == 0)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"
SILENCED = PROJECTS / "print_silenced_by_references_helper"
UNKNOWN = PROJECTS / "print_not_silenced_by_unknown_helper"


def _ddp119(root: Path) -> list[tuple[str, int, str]]:
    outcome = check_paths([str(root)], CheckOptions(select=("DDP119",)))
    return [
        (Path(f.location.path).name, f.location.line, f.evidence.get("kind", ""))
        for f in outcome.findings
    ]


def test_the_references_family_out_of_view_silences_print() -> None:
    assert _ddp119(SILENCED) == []


def test_an_init_helper_alone_does_not_silence_print() -> None:
    assert _ddp119(UNKNOWN) == [("engine.py", 5, "print")]


def test_the_family_helper_in_view_is_judged_by_what_it_does(tmp_path: Path) -> None:
    """util/misc.py in the tree, its init_distributed_mode without setup_for_distributed."""
    project = tmp_path / SILENCED.name
    shutil.copytree(SILENCED, project)
    (project / "util").mkdir()
    (project / "util" / "misc.py").write_text(
        "import torch.distributed as dist\n\n\n"
        "class MetricLogger:\n"
        "    def __init__(self, delimiter=' '):\n"
        "        self.delimiter = delimiter\n\n"
        "    def log_every(self, iterable, freq, header):\n"
        "        yield from iterable\n\n"
        "    def synchronize_between_processes(self):\n"
        "        pass\n\n\n"
        "def init_distributed_mode(args):\n"
        "    dist.init_process_group('nccl')\n"
    )
    assert [kind for _, _, kind in _ddp119(project)] == ["print"]


def test_a_print_in_a_file_outside_the_program_is_unaffected(tmp_path: Path) -> None:
    """The family's helper is called by main.py's program only: a separate script beside it
    that prints in its loop keeps its finding."""
    project = tmp_path / SILENCED.name
    shutil.copytree(SILENCED, project)
    (project / "other.py").write_text((UNKNOWN / "main.py").read_text())
    shutil.copy(UNKNOWN / "engine.py", project / "other_engine.py")
    text = (project / "other.py").read_text().replace("from engine", "from other_engine")
    (project / "other.py").write_text(text)
    assert [name for name, _, _ in _ddp119(project)] == ["other_engine.py"]
