"""The test suite's fault hook in the doctor's job (tests/job_hook/job_faults.py): runs at the
start of every Python that has this folder on its PYTHONPATH, acts only when
DDP_DOCTOR_TEST_FAULT names a fault, then runs the sitecustomize it shadows, if any."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

from job_faults import VARIABLE, install


def _run_the_shadowed_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get(VARIABLE):
    install(os.environ[VARIABLE])
_run_the_shadowed_sitecustomize()
