"""The patient's Python: which interpreter the doctor examines, and running code inside it.

The patient is the interpreter that trains: `--python PATH`, else the active virtualenv or conda
environment, else the doctor's own interpreter when it has torch, else `python3` on PATH. Every
torch probe, the DataParallel probe and the job run there, from a payload copied into a
temporary folder (payload.py), never from the doctor's own site-packages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.machine import PythonFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeTimedOut
from ddp_doctor.probes.job.payload import PACKAGE, install_payload, patient_environment
from ddp_doctor.probes.runner import CommandResult, run_command

Runner = Callable[..., CommandResult]
ENVIRONMENT_VARIABLES = ("VIRTUAL_ENV", "CONDA_PREFIX")


def choose_python(
    explicit: str | None,
    environ: Mapping[str, str],
    own_has_torch: Callable[[], bool] = lambda: importlib.util.find_spec("torch") is not None,
) -> tuple[str, str]:
    """(the interpreter's path, why this one)."""
    if explicit:
        return shutil.which(explicit) or explicit, "--python"
    for variable in ENVIRONMENT_VARIABLES:
        prefix = environ.get(variable)
        found = _python_in(Path(prefix)) if prefix else None
        if found:
            return found, f"{variable} is set"
    if own_has_torch():
        return sys.executable, "the doctor's own Python has torch"
    on_path = shutil.which("python3") or shutil.which("python")
    if on_path:
        return on_path, "python3 on PATH"
    return sys.executable, "no other Python found"


def _python_in(prefix: Path) -> str | None:
    for candidate in (prefix / "bin" / "python", prefix / "bin" / "python3", prefix / "python.exe"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def collect_python(
    python: str, chosen_by: str, timeout_s: float = 15.0, runner: Runner = run_command
) -> PythonFacts:
    """Describes the patient without importing torch; a Python that does not run is a fact."""
    asked = PythonFacts(executable=python, chosen_by=chosen_by)
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ProbeFailed(f"no runnable Python at {python!r}", _broken(asked, "not found"))
    try:
        result = run_in_patient(python, "python_describe", timeout_s, runner)
    except CouldNotStart as error:
        raise ProbeFailed(str(error)) from None  # no facts: nothing is known of the patient
    if result.timed_out:
        raise ProbeTimedOut(f"{python} did not describe itself within {timeout_s:g} s")
    try:
        described = json.loads(result.stdout.strip().splitlines()[-1])
        described.pop("executable", None)  # the path asked for is the one the job runs
        return from_jsonable(PythonFacts, {**_as_dict(asked), **described})
    except (IndexError, ValueError, CodecError, TypeError):
        why = _last_line(result.stderr) or f"exit code {result.returncode}"
        raise ProbeFailed(f"{python} does not run: {why}", _broken(asked, why)) from None


def run_in_patient(
    python: str,
    module: str,
    timeout_s: float,
    runner: Runner = run_command,
    environ: Mapping[str, str] | None = None,
) -> CommandResult:
    """Runs `python -m ddp_doctor_patient.MODULE` from a fresh payload, removed afterwards;
    raises CouldNotStart when the doctor cannot make the payload or start a process."""
    try:
        with tempfile.TemporaryDirectory(prefix="ddp-doctor-") as folder:
            root = install_payload(Path(folder))
            env = patient_environment(os.environ if environ is None else environ, root, root)
            env["TMPDIR"] = folder
            result = runner(
                [python, "-m", f"{PACKAGE}.{module}"], timeout_s=timeout_s, env=env, cwd=folder
            )
    except OSError as error:
        raise CouldNotStart(f"cannot write the probe's files: {error.strerror or error}") from None
    if result.out_of_resources:
        raise CouldNotStart(f"cannot start a process: {result.stderr}")
    return result


class CouldNotStart(Exception):
    """The doctor itself could not run code in the patient: no folder for the payload, or no
    process (the process or memory limit reached)."""


def _broken(asked: PythonFacts, why: str) -> PythonFacts:
    return PythonFacts(
        executable=asked.executable, chosen_by=asked.chosen_by, runs=False, error=why
    )


def _as_dict(facts: PythonFacts) -> dict[str, object]:
    return {"executable": facts.executable, "chosen_by": facts.chosen_by}


def _last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None
