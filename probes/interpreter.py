"""The patient's Python: which interpreter the doctor examines, and running code inside it.

The patient is the interpreter that trains: `--python PATH` (an interpreter, or a virtualenv
or conda env folder), else the active virtualenv or conda
environment, else the doctor's own interpreter when it has torch, else `python3` on PATH. Every
torch probe, the DataParallel probe and the job run there, from a payload copied into a
temporary folder (payload.py), never from the doctor's own site-packages.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts.machine import PythonCandidate, PythonFacts
from ddp_doctor.probes.base import ProbeFailed, ProbeTimedOut
from ddp_doctor.probes.job.payload import PACKAGE, install_payload, patient_environment
from ddp_doctor.probes.runner import CommandResult, run_command

Runner = Callable[..., CommandResult]
ENVIRONMENT_VARIABLES = ("VIRTUAL_ENV", "CONDA_PREFIX")
PROJECT_ENVIRONMENTS = (".venv", "venv")  # in the working folder, as uv and poetry make them
# where an environment keeps its Python: venv and conda on POSIX, venv and conda on Windows
PYTHON_IN_PREFIX = ("bin/python", "bin/python3", "Scripts/python.exe", "python.exe")


def choose_python(
    explicit: str | None,
    environ: Mapping[str, str],
    own_has_torch: Callable[[], bool] = lambda: importlib.util.find_spec("torch") is not None,
) -> tuple[str, str]:
    """(the interpreter's absolute path, why this one). `--python` takes an interpreter (a
    path or a name on PATH), a virtualenv folder or a conda env folder."""
    if explicit:
        return _explicit(explicit)
    for variable in ENVIRONMENT_VARIABLES:
        prefix = environ.get(variable)
        found = _python_in(Path(prefix)) if prefix else None
        if found:
            return found, f"{variable} is set"
    if own_has_torch():
        return sys.executable, "the doctor's own Python has torch"
    on_path = shutil.which("python3") or shutil.which("python")
    if on_path:
        return os.path.abspath(on_path), "python3 on PATH (no virtualenv or conda env active)"
    return sys.executable, "no other Python found"


def _explicit(explicit: str) -> tuple[str, str]:
    if os.path.isdir(explicit):
        found = _python_in(Path(explicit))
        if found:
            return found, f"--python {explicit} (the environment's own Python)"
        return os.path.abspath(explicit), f"--python {explicit} (a folder with no Python in it)"
    found = shutil.which(explicit) if os.sep not in explicit else None
    return os.path.abspath(found or explicit), "--python"


def _python_in(prefix: Path) -> str | None:
    """The environment's interpreter, absolute; symlinks kept (a venv's python is one)."""
    for relative in PYTHON_IN_PREFIX:
        candidate = prefix / relative
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    return None


def find_candidates(
    chosen: str, environ: Mapping[str, str], folder: Path | None = None
) -> tuple[PythonCandidate, ...]:
    """The environments a user may train in, other than the chosen one: the active virtualenv
    and conda env, `.venv` or `venv` in the working folder, the doctor's own Python. Read off
    the file system (a torch folder in site-packages), without starting a Python."""
    folder = Path.cwd() if folder is None else folder
    places = [(Path(environ[v]), v) for v in ENVIRONMENT_VARIABLES if environ.get(v)]
    places += [(folder / name, f"{name} in the working folder") for name in PROJECT_ENVIRONMENTS]
    places.append((Path(sys.prefix), "the doctor's own environment"))
    found: dict[str, PythonCandidate] = {}
    for prefix, why in places:
        python = _python_in(prefix)
        if python and python != chosen and python not in found:
            found[python] = PythonCandidate(python, why, _has_torch(prefix))
    return tuple(found.values())


def _has_torch(prefix: Path) -> bool:
    patterns = (
        "lib/python3*/site-packages/torch/__init__.py",
        "Lib/site-packages/torch/__init__.py",
    )
    try:
        return any(next(prefix.glob(pattern), None) is not None for pattern in patterns)
    except OSError:
        return False


def collect_python(
    python: str, chosen_by: str, timeout_s: float = 15.0, runner: Runner = run_command
) -> PythonFacts:
    """Describes the patient without importing torch; a Python that does not run is a fact."""
    asked = PythonFacts(
        executable=python, chosen_by=chosen_by, candidates=find_candidates(python, os.environ)
    )
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
    return dataclasses.replace(asked, runs=False, error=why)


def _as_dict(facts: PythonFacts) -> dict[str, object]:
    candidates = [dataclasses.asdict(candidate) for candidate in facts.candidates]
    return {"executable": facts.executable, "chosen_by": facts.chosen_by, "candidates": candidates}


def _last_line(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None
