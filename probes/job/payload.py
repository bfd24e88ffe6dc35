"""The code that runs inside the patient's Python, copied into a temporary folder per use.

The patient is the interpreter that trains (`run --python`, else the active environment). The
doctor need not be installed there, and its own site-packages never go on that interpreter's
path (they could shadow the user's packages): the modules below import only the standard
library, torch (pynvml where the patient has it) and each other, and travel as a package of
their own, `ddp_doctor_patient`, on PYTHONPATH. tests/test_patient.py holds every file of patient/ to that.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import ddp_doctor.patient
from ddp_doctor.patient.watchdog import FOLDER_VARIABLE, WATCH_VARIABLE
from ddp_doctor.probes.workspace import current_workspace

PACKAGE = "ddp_doctor_patient"
PATIENT_ROOT = Path(ddp_doctor.patient.__file__).resolve().parent


def install_payload(folder: Path) -> Path:
    """Copies the patient-side modules into folder/ddp_doctor_patient; returns `folder`, the
    entry for PYTHONPATH."""
    package = folder / PACKAGE
    shutil.copytree(
        PATIENT_ROOT,
        package,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        dirs_exist_ok=True,
    )
    return folder


def patient_environment(
    base: Mapping[str, str], payload_root: Path, folder: Path | None = None
) -> dict[str, str]:
    """`base` with the payload first on PYTHONPATH (the user's own entries kept after it), the
    doctor's pid for the watchdog, and the folder it removes if the doctor dies: the run's
    workspace, else `folder`."""
    env = dict(base)
    paths = [str(payload_root), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[WATCH_VARIABLE] = watch_token(os.getpid())
    leftover = current_workspace() or folder
    if leftover is not None:
        env[FOLDER_VARIABLE] = str(leftover)
    else:
        env.pop(FOLDER_VARIABLE, None)
    return env


def watch_token(pid: int) -> str:
    """ "PID:STARTTIME": the start time tells a reused pid apart from the doctor."""
    return f"{pid}:{process_start_time(pid) or 0}"


def process_start_time(pid: int, proc: Path = Path("/proc")) -> int | None:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None
