"""Each program judged apart: a helper module two entry points import is rank code for the
distributed one only; the one-process script beside it gets what it gets checked alone."""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECT = Path(__file__).parent.parent / "fixtures" / "scripts" / "projects"
SHARED = PROJECT / "shared_loader_in_one_process_script"


def _codes(*paths: Path) -> set[tuple[str, str]]:
    outcome = check_paths([str(p) for p in paths], CheckOptions(select=("ALL",)))
    return {(Path(f.location.path).name, f.code) for f in outcome.findings if f.location}


def test_the_distributed_program_keeps_its_finding() -> None:
    assert ("main.py", "DDP118") in _codes(SHARED)


def test_the_one_process_script_gets_no_rank_finding_beside_it() -> None:
    """test.py calls the loader helper whose sampler main.py's ranks build: checked with the
    folder, as checked alone, it has no rank finding (no DDP118, no DDP119)."""
    in_folder = {code for name, code in _codes(SHARED) if name == "test.py"}
    alone = {code for _, code in _codes(SHARED / "test.py")}
    assert in_folder == alone == set()


def test_two_files_named_together_are_still_two_programs() -> None:
    named = {
        code for name, code in _codes(SHARED / "test.py", SHARED / "main.py") if name == "test.py"
    }
    assert not named & {"DDP118", "DDP119"}
