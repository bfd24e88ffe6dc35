"""The code table (codes.py) is the one source of codes: every module it names registers
exactly its codes, with a check function where the code is judged by one, and commands load
only the modules they need."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ddp_doctor import registry
from ddp_doctor.codes import BY_CODE, CODES, JUDGED, Code

CODE_FORMAT = re.compile(r"^DDP\d{3}$")
KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)+$")
BLOCK_OF_JUDGED = {"script": "DDP1", "doctor": "DDP9"}


def test_codes_and_names_are_unique() -> None:
    assert len({c.code for c in CODES}) == len(CODES)
    assert len({c.name for c in CODES}) == len(CODES)


def test_table_is_in_code_order() -> None:
    assert [c.code for c in CODES] == sorted(c.code for c in CODES)


@pytest.mark.parametrize("entry", CODES, ids=lambda c: c.code)
def test_entry_is_well_formed(entry: Code) -> None:
    assert CODE_FORMAT.match(entry.code)
    assert KEBAB.match(entry.name), entry.name
    assert entry.judged in JUDGED
    assert entry.summary.endswith(".") and "\n" not in entry.summary
    block = BLOCK_OF_JUDGED.get(entry.judged)
    assert block is None or entry.code.startswith(block)


@pytest.mark.parametrize("entry", CODES, ids=lambda c: c.code)
def test_module_attaches_what_the_table_says(entry: Code) -> None:
    spec = registry.spec_for(entry.code)
    assert spec.entry is entry
    assert (spec.check is not None) == (entry.judged in registry.WITH_CHECK)
    assert spec.fix.text
    positions = [spec.doc.find(part) for part in ("What it finds:", "Why it matters:", "Fix:")]
    assert all(p > 0 for p in positions) and positions == sorted(positions), entry.code


def test_no_module_registers_a_code_outside_the_table() -> None:
    registry.load_all()
    assert set(registry.RULES) == set(BY_CODE)


def test_a_code_missing_from_the_table_is_refused() -> None:
    with pytest.raises(registry.RegistryError):
        registry.describe("DDP999", registry.Remediation("x"), "What it finds: x")


def test_selector_needs_no_rule_module() -> None:
    selector = registry.Selector.parse(["DDP1", "torch-unusable"], ["DDP113"])
    assert selector.allows("DDP101") and selector.allows("DDP001")
    assert not selector.allows("DDP113") and not selector.allows("DDP201")


def _modules_loaded_by(*argv: str) -> set[str]:
    program = (
        "import sys\n"
        "from ddp_doctor.cli import main\n"
        f"try:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass\n"
        "print('MODULES', ' '.join(m for m in sys.modules if m.startswith('ddp_doctor')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("MODULES"))
    return set(line.split()[1:])


def test_rules_and_help_load_no_rule_module_and_no_torch() -> None:
    for argv in (["rules"], ["--help"], ["rules", "--format", "markdown"]):
        loaded = _modules_loaded_by(*argv)
        assert not {m for m in loaded if ".rules." in m or m.endswith(".rules")}, argv
        assert "torch" not in loaded


def test_check_loads_script_rules_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.py"
    script.write_text("import torch\n")
    loaded = _modules_loaded_by("check", str(script))
    assert any(m.startswith("ddp_doctor.script.rules.") for m in loaded)
    assert not any(m.startswith("ddp_doctor.rules.") for m in loaded)


def test_saved_rule_docs_are_current() -> None:
    """`explain` reads rule_docs.json; the rule modules are the source of what it holds."""
    from ddp_doctor.rule_docs import DOCS_FILE, current_docs, render_docs

    expected = render_docs(current_docs())
    if os.environ.get("UPDATE_GOLDEN") == "1":
        DOCS_FILE.write_text(expected, encoding="utf-8")
    assert DOCS_FILE.read_text(encoding="utf-8") == expected, (
        "rule_docs.json is stale: rerun with UPDATE_GOLDEN=1"
    )


def test_explain_loads_no_rule_module() -> None:
    loaded = _modules_loaded_by("explain", "DDP113")
    assert not any(m.startswith(("ddp_doctor.script.", "ddp_doctor.rules.")) for m in loaded)
