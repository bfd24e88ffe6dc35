"""The README's rule table is generated from the code table and must be current."""

from __future__ import annotations

import re
from pathlib import Path

from ddp_doctor.codes import CODES
from ddp_doctor.commands.explain import rules_markdown

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_rule_table_is_current() -> None:
    section = re.search(r"<!-- rules:start -->\n(.*)\n<!-- rules:end -->", README.read_text(), re.S)
    assert section, "README.md lost its rules markers"
    assert section.group(1) == rules_markdown(CODES), (
        "README rule table is stale: replace it with `ddp-doctor rules --format markdown`"
    )


def test_readme_names_every_command() -> None:
    text = README.read_text()
    for command in ("run", "check", "logs", "diagnose", "explain", "rules", "trace", "attach"):
        assert f"### `ddp-doctor {command}" in text or f"`ddp-doctor {command}" in text, command


def _fenced_commands(section: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", section, flags=re.S)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    quick_start = README.read_text(encoding="utf-8").split("## Quick start", 1)[1]
    setup_and_run, test_command = _fenced_commands(quick_start)[:2]
    assert "ddp-doctor run" in setup_and_run and "python3 -m venv" in setup_and_run
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.rstrip().splitlines()[-1] == test_command
