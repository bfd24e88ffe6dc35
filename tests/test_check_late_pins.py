"""DDP107's late pin when the helper inits and its caller pins: reported on the caller's late
pin after its call of the helper (where the init and the pin meet), in a folder run and file by file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.script.runner import CheckOptions, check_paths

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "projects"


def late_pins(*paths: Path) -> list[tuple[str, int]]:
    outcome = check_paths([str(p) for p in paths], CheckOptions(select=("DDP107",)))
    return sorted(
        (Path(f.location.path).name, f.location.line)
        for f in outcome.findings
        if f.code == "DDP107"
    )


@pytest.mark.parametrize("target", ["", "train.py"])
def test_a_late_pin_after_a_helper_init_is_the_caller_s(target: str) -> None:
    project = PROJECTS / "init_helper_pinned_late"
    assert late_pins(project / target if target else project) == [("train.py", 12)]


def test_the_helper_checked_alone_leaves_it_to_its_caller() -> None:
    assert late_pins(PROJECTS / "init_helper_pinned_late" / "utils" / "dist.py") == []


def test_the_finding_names_the_pin_and_the_helper_s_init() -> None:
    outcome = check_paths([str(PROJECTS / "init_helper_pinned_late")])
    (finding,) = [f for f in outcome.findings if f.code == "DDP107"]
    [init] = finding.evidence["related"]
    assert (Path(str(init["path"])).name, init["line"]) == ("dist.py", 10)
    assert init["role"] == "process-group"  # the cause is the caller's order of two calls


def test_a_pin_before_the_helper_call_is_silent() -> None:
    assert late_pins(PROJECTS / "init_helper_pinned_first") == []


def test_a_constructor_that_pins_after_the_caller_s_init_is_reported_on_the_init() -> None:
    """The other way round (BYOL's run_task): the init's function meets the late pin at its
    init line; the constructor's set_device is not where the order goes wrong."""
    assert late_pins(PROJECTS / "pin_late_in_a_constructor") == [("main.py", 14)]
