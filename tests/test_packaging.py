"""Every import package under doctor/, probes/ and patient/ ships in the wheel (pyproject's list)."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for top, name in (
        ("doctor", "ddp_doctor"),
        ("probes", "ddp_doctor.probes"),
        ("patient", "ddp_doctor.patient"),
    ):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((name, *parts)))
    assert found == listed
