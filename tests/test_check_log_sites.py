"""DDP119 across the files of a tree: a launcher of the tree that gives every process its own
stdout (tacotron2's multiproc.py) makes the program's prints rank 0's; one that leaves them
on the terminal does not."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"


def _log_lines(name: str) -> list[tuple[str, int]]:
    outcome = check_paths([str(PROJECTS / name)], CheckOptions(select=("ALL",)))
    return [
        (Path(f.location.path).name, f.location.line)
        for f in outcome.findings
        if f.code == "DDP119" and f.location is not None
    ]


def test_print_silent_where_the_launcher_redirects_stdout() -> None:
    assert _log_lines("print_redirected_by_launcher") == []


def test_print_reported_where_the_launcher_keeps_stdout() -> None:
    assert _log_lines("print_not_redirected_by_launcher") == [("train.py", 18)]


def test_launcher_alone_is_not_enough_when_it_names_another_script(tmp_path: Path) -> None:
    source = PROJECTS / "print_redirected_by_launcher"
    (tmp_path / "train.py").write_text((source / "train.py").read_text("utf-8"), "utf-8")
    launcher = (source / "multiproc.py").read_text("utf-8")
    launcher = launcher.replace("[sys.executable, *arguments", '[sys.executable, "eval.py"')
    (tmp_path / "multiproc.py").write_text(launcher, "utf-8")
    outcome = check_paths([str(tmp_path)], CheckOptions(select=("ALL",)))
    assert [f.location.line for f in outcome.findings if f.code == "DDP119"] == [18]


def test_logging_silent_where_the_entry_point_sets_levels_per_rank() -> None:
    """msn's shape: the trainer module calls basicConfig(level=INFO) and logs every epoch; the
    spawning entry point sets the root logger to ERROR off rank 0."""
    assert _log_lines("logging_levels_set_by_entry") == []


def test_logging_reported_where_the_entry_point_sets_one_level_for_all() -> None:
    assert _log_lines("logging_not_set_by_entry") == [("trainer.py", 16)]
