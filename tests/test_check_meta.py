"""The script rules as a catalogue: codes, names, fixtures and documentation all line up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_doctor.cli import cli
from ddp_doctor.registry import RULES, RuleSpec, load_all, rules_judged
from ddp_doctor.script.analyze import script_rules
from ddp_doctor.script.rules.doctor import FILE_UNREADABLE, SYNTAX_ERROR

SCRIPTS = Path(__file__).resolve().parent.parent / "fixtures" / "scripts"
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
DOC_PARTS = ("What it finds", "Why it matters", "Example", "Fix")


def script_specs() -> list[RuleSpec]:
    return [*rules_judged("script"), RULES[SYNTAX_ERROR], RULES[FILE_UNREADABLE]]


def static_rules() -> list[RuleSpec]:
    return [spec for spec in script_rules() if spec.code.startswith("DDP1")]


def test_codes_and_names_are_unique() -> None:
    load_all()
    specs = list(RULES.values())
    assert len({s.code for s in specs}) == len(specs)
    assert len({s.name for s in specs}) == len(specs)


def test_doctor_codes_for_files_are_registered() -> None:
    assert RULES[SYNTAX_ERROR].judged == RULES[FILE_UNREADABLE].judged == "doctor"


@pytest.mark.parametrize("spec", script_specs(), ids=lambda s: s.code)
def test_name_is_kebab_case(spec: RuleSpec) -> None:
    assert KEBAB.match(spec.name), spec.name


@pytest.mark.parametrize("spec", script_specs(), ids=lambda s: s.code)
def test_docstring_has_summary_and_four_parts(spec: RuleSpec) -> None:
    summary, *rest = spec.doc.splitlines()
    assert summary.strip() and rest and not rest[0].strip(), "one-line summary, then a blank line"
    positions = [spec.doc.find(f"{part}:") for part in DOC_PARTS]
    assert all(p > 0 for p in positions), f"{spec.code} lacks one of {DOC_PARTS}"
    assert positions == sorted(positions), f"{spec.code}: parts out of order"
    assert spec.fix.text


@pytest.mark.parametrize("spec", static_rules(), ids=lambda s: s.code)
def test_rule_has_fixture_with_both_parts(spec: RuleSpec) -> None:
    fixture = SCRIPTS / f"{spec.code}_{spec.name.replace('-', '_')}.py"
    assert fixture.is_file(), f"missing {fixture.name}"
    lines = [line.strip() for line in fixture.read_text(encoding="utf-8").splitlines()]
    assert "# Errors" in lines and "# OK" in lines


@pytest.mark.parametrize("spec", script_specs(), ids=lambda s: s.code)
def test_explain_prints_the_docstring(spec: RuleSpec) -> None:
    result = CliRunner().invoke(cli, ["explain", spec.code])
    assert result.exit_code == 0, result.output
    assert spec.code in result.output and "Why it matters" in result.output
