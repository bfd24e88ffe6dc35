"""Which other Python would pick the training environment: the fix of DDP001 and DDP012 when
the Python the doctor examined is not the one the user trains with."""

from __future__ import annotations

import os

from ddp_doctor.facts.machine import PythonCandidate, PythonFacts
from ddp_doctor.model import Remediation

ACTIVATE = {"CONDA_PREFIX": "conda activate {prefix}"}
VENV_ACTIVATE = ". {prefix}/bin/activate"


def torch_missing_here(python: PythonFacts | None) -> bool:
    """The examined Python runs but has no torch at all (not a torch that fails to import)."""
    return python is not None and python.runs and python.torch_origin is None


def chosen_line(python: PythonFacts) -> str:
    return f"{python.executable} (chosen because: {python.chosen_by})"


def pick_another_python(python: PythonFacts, problem: str) -> Remediation:
    """`--python` or an activation for each environment found with torch; without one, how to
    name the training Python."""
    with_torch = [c for c in python.candidates if c.has_torch]
    if not with_torch:
        others = ", ".join(f"{c.executable} ({c.found_as})" for c in python.candidates)
        seen = f" The other Pythons found have no torch either: {others}." if others else ""
        return Remediation(
            f"{problem}. Activate the virtualenv or conda env you train in, or pass "
            "`--python` with its interpreter or its folder (`--python .venv`); install torch "
            f"there if it has none.{seen}",
            ("which -a python3 python torchrun",),
        )
    options = ", ".join(f"`--python {c.executable}` ({c.found_as})" for c in with_torch)
    return Remediation(
        f"{problem}. Environments with torch found here: pass {options}, or activate one "
        "before running the doctor.",
        tuple(_activation(c) for c in with_torch),
    )


def _activation(candidate: PythonCandidate) -> str:
    prefix = os.path.dirname(os.path.dirname(candidate.executable))
    template = ACTIVATE.get(candidate.found_as, VENV_ACTIVATE)
    return template.format(prefix=prefix)
