"""A traced rank's entry point: installs the monitor, then runs the user's script or module as
Python would (`python -m ddp_doctor_patient.trace.boot script|module TARGET [ARGS...]`).

sys.argv, sys.path[0] and __name__ == "__main__" are what `python TARGET ARGS` (or `python -m
TARGET ARGS`) gives the script; the user's sitecustomize and .pth files ran as usual at
start-up, since the payload adds no sitecustomize of its own. How the script ended goes into
the journal; its exit code and traceback are unchanged.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Callable

from .monitor import install_from_environment, record_exception
from .recorder import TraceBound

KINDS = ("script", "module")


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in KINDS:
        sys.stderr.write("usage: python -m ddp_doctor_patient.trace.boot script|module TARGET\n")
        raise SystemExit(2)
    kind, target, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    recorder = install_from_environment(entry=kind)
    sys.argv = [target, *rest]
    run: Callable[[], object]
    if kind == "script":
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        run = lambda: runpy.run_path(target, run_name="__main__")  # noqa: E731
    else:
        run = lambda: runpy.run_module(target, run_name="__main__", alter_sys=True)  # noqa: E731
    try:
        run()
    except TraceBound as bound:
        if recorder:
            recorder.event("end", how="bound", reason=bound.reason)
        raise
    except SystemExit as exit:
        if recorder:
            recorder.event("end", how="exit", code=_code(exit.code))
        raise
    except BaseException as error:
        record_exception(recorder, error)
        if recorder:
            recorder.event("end", how="exception")
        raise
    if recorder:
        recorder.event("end", how="returned")


def _code(code: object) -> object:
    return code if code is None or isinstance(code, int) else str(code)[:200]


if __name__ == "__main__":
    main()
