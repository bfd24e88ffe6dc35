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


def test_builder_of_a_launched_library_trainer_runs_in_every_process() -> None:
    """Mask2Former's shape: a print in the parameter loop of Trainer(DefaultTrainer)'s
    build_optimizer, which DefaultTrainer.__init__ calls in every process of detectron2's
    launch; build_writers, called on the main process only, stays silent."""
    assert _log_lines("library_trainer_builder_prints") == [("train_net.py", 14)]


def test_builder_of_a_project_copy_of_default_trainer_out_of_view_prints_per_rank() -> None:
    """OneFormer's calc_throughput.py shape: `class Trainer(TPDefaultTrainer)`, the base the
    project's own copy of detectron2's DefaultTrainer, not in view; its build_optimizer's print
    is reported, a method DefaultTrainer's __init__ does not call (summarize) is not."""
    assert _log_lines("copied_trainer_builder_prints") == [("train_throughput.py", 16)]


def test_a_default_trainer_named_base_outside_the_detectron2_family_is_not_read_so() -> None:
    assert _log_lines("copied_trainer_builder_prints_other_family") == []


def test_a_default_trainer_named_base_defined_in_the_tree_is_not_taken_by_name(
    tmp_path: Path,
) -> None:
    """With the base in view its own __init__ decides (here it calls no builder)."""
    source = PROJECTS / "copied_trainer_builder_prints" / "tools" / "train_throughput.py"
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "train_throughput.py").write_text(source.read_text("utf-8"), "utf-8")
    (tmp_path / "tools" / "trainers").mkdir()
    (tmp_path / "tools" / "trainers" / "__init__.py").write_text("", "utf-8")
    (tmp_path / "tools" / "trainers" / "trainer.py").write_text(
        "class TPDefaultTrainer:\n    def __init__(self, cfg):\n        self.cfg = cfg\n\n"
        "    def train(self):\n        return None\n",
        "utf-8",
    )
    outcome = check_paths([str(tmp_path)], CheckOptions(select=("ALL",)))
    assert [f.code for f in outcome.findings if f.code == "DDP119"] == []


def test_builder_of_a_library_trainer_in_one_process_is_silent(tmp_path: Path) -> None:
    source = PROJECTS / "library_trainer_builder_prints" / "train_net.py"
    text = source.read_text("utf-8").replace(
        "    launch(main, args.num_gpus, args=(args,))", "    main(args)"
    )
    (tmp_path / "train_net.py").write_text(text, "utf-8")
    outcome = check_paths([str(tmp_path)], CheckOptions(select=("ALL",)))
    assert [f.code for f in outcome.findings if f.code == "DDP119"] == []
