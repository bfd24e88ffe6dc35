"""The patient's Python: which one is chosen, how it is described, and what runs inside it."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_doctor.probes.base import ProbeFailed
from ddp_doctor.probes.interpreter import (
    choose_python,
    collect_python,
    find_candidates,
    run_in_patient,
)
from ddp_doctor.probes.job import payload

PATIENT = payload.PATIENT_ROOT
STDLIB = set(sys.stdlib_module_names)
ALLOWED_THIRD_PARTY = {"torch", "pynvml"}


def fake_python(folder: Path, body: str) -> str:
    """An executable that stands in for an interpreter (a shell script)."""
    path = folder / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


# --- choosing ------------------------------------------------------------------------------
def test_explicit_python_wins(tmp_path: Path) -> None:
    chosen = choose_python(str(tmp_path / "py"), {"VIRTUAL_ENV": "/x"}, lambda: True)
    assert chosen == (str(tmp_path / "py"), "--python")


def test_active_virtualenv_then_conda(tmp_path: Path) -> None:
    venv, conda = tmp_path / "venv", tmp_path / "conda"
    for prefix in (venv, conda):
        fake_python((prefix / "bin").mkdir(parents=True) or prefix / "bin", "exit 0")
    both = {"VIRTUAL_ENV": str(venv), "CONDA_PREFIX": str(conda)}
    assert choose_python(None, both, lambda: True) == (
        str(venv / "bin" / "python"),
        "VIRTUAL_ENV is set",
    )
    assert choose_python(None, {"CONDA_PREFIX": str(conda)}, lambda: True)[1] == (
        "CONDA_PREFIX is set"
    )


def test_a_variable_naming_no_python_is_passed_over(tmp_path: Path) -> None:
    python, why = choose_python(None, {"VIRTUAL_ENV": str(tmp_path)}, lambda: True)
    assert (python, why) == (sys.executable, "the doctor's own Python has torch")


def test_without_torch_here_python3_on_path_is_taken() -> None:
    python, why = choose_python(None, {}, lambda: False)
    assert why.startswith("python3 on PATH") and os.path.basename(python).startswith("python")


@pytest.mark.parametrize("layout", ["bin/python", "python.exe", "Scripts/python.exe"])
def test_python_takes_an_environment_folder(
    tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--python .venv` (a virtualenv, as uv accepts), a conda env, a Windows venv."""
    interpreter = tmp_path / "env" / layout
    interpreter.parent.mkdir(parents=True)
    fake_python(interpreter.parent, "exit 0")
    (interpreter.parent / "python").rename(interpreter)
    monkeypatch.chdir(tmp_path)
    python, why = choose_python("env", {}, lambda: True)
    assert python == str(interpreter) and why.startswith("--python env")


def test_a_relative_python_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probes run in their own folder: a relative interpreter must not change meaning."""
    (tmp_path / "bin").mkdir()
    fake_python(tmp_path / "bin", "exit 0")
    monkeypatch.chdir(tmp_path)
    assert choose_python("bin/python", {}, lambda: True)[0] == str(tmp_path / "bin" / "python")


def test_a_folder_without_python_says_so(tmp_path: Path) -> None:
    python, why = choose_python(str(tmp_path), {}, lambda: True)
    assert "no Python" in why
    with pytest.raises(ProbeFailed):
        collect_python(python, why)


def test_candidates_name_the_environments_with_torch(tmp_path: Path) -> None:
    with_torch, bare = tmp_path / "project" / ".venv", tmp_path / "conda"
    for prefix in (with_torch, bare):
        (prefix / "bin").mkdir(parents=True)
        fake_python(prefix / "bin", "exit 0")
    site = with_torch / "lib" / "python3.11" / "site-packages" / "torch"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    found = find_candidates("/usr/bin/python3", {"CONDA_PREFIX": str(bare)}, tmp_path / "project")
    by_path = {c.executable: c for c in found}
    assert by_path[str(with_torch / "bin" / "python")].has_torch
    assert by_path[str(with_torch / "bin" / "python")].found_as == ".venv in the working folder"
    assert not by_path[str(bare / "bin" / "python")].has_torch
    assert "/usr/bin/python3" not in by_path  # the chosen one is no candidate


# --- describing ----------------------------------------------------------------------------
def test_this_python_describes_itself_and_finds_torch() -> None:
    facts = collect_python(sys.executable, "test")
    assert facts.runs and facts.version == ".".join(map(str, sys.version_info[:3]))
    assert facts.torch_origin and facts.torch_origin.endswith("__init__.py")
    assert facts.packages.get("torch") and facts.executable == sys.executable


def test_a_missing_python_is_a_fact_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(ProbeFailed) as failed:
        collect_python(str(tmp_path / "nope"), "--python")
    assert failed.value.facts.runs is False and failed.value.facts.chosen_by == "--python"


def test_a_python_that_cannot_run_the_payload_is_described_as_broken(tmp_path: Path) -> None:
    broken = fake_python(tmp_path, 'echo "SyntaxError: invalid syntax" >&2; exit 1')
    with pytest.raises(ProbeFailed) as failed:
        collect_python(broken, "--python")
    assert failed.value.facts.runs is False
    assert "SyntaxError" in (failed.value.facts.error or "")


def test_an_old_python_is_described_with_its_version(tmp_path: Path) -> None:
    old = fake_python(tmp_path, """echo '{"version": "3.7.17", "torch_origin": null}'""")
    facts = collect_python(old, "python3 on PATH")
    assert facts.too_old and facts.torch_origin is None


# --- the payload ---------------------------------------------------------------------------
PATIENT_FILES = sorted(PATIENT.rglob("*.py"))


@pytest.mark.parametrize("path", PATIENT_FILES, ids=lambda p: str(p.relative_to(PATIENT)))
def test_patient_files_import_only_stdlib_torch_and_each_other(path: Path) -> None:
    """Every file of patient/ (no hand-kept list): absolute imports of the standard library,
    torch and pynvml only; the patient's own modules by relative import only."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            continue  # relative: inside the patient package (checked to resolve below)
        if isinstance(node, ast.ImportFrom):
            tops = [(node.module or "").split(".")[0]]
        elif isinstance(node, ast.Import):
            tops = [alias.name.split(".")[0] for alias in node.names]
        else:
            continue
        for top in tops:
            allowed = STDLIB | ALLOWED_THIRD_PARTY | {"__future__"}
            assert top in allowed, f"{path.name} imports {top}"


@pytest.mark.parametrize("path", PATIENT_FILES, ids=lambda p: str(p.relative_to(PATIENT)))
def test_relative_imports_in_the_patient_resolve_inside_it(path: Path) -> None:
    package = path.parent
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.level):
            continue
        base = package
        for _ in range(node.level - 1):
            base = base.parent
        assert PATIENT in (base, *base.parents), f"{path.name} reaches outside the patient"
        target = base.joinpath(*(node.module or "").split("."))
        assert target.with_suffix(".py").exists() or (target / "__init__.py").exists(), (
            f"{path.name}: {node.module}"
        )


def test_the_python_describer_parses_as_old_python() -> None:
    source = (PATIENT / "python_describe.py").read_text()
    ast.parse(source, feature_version=(3, 6))


def test_payload_runs_without_the_doctor_installed(tmp_path: Path) -> None:
    """`-I`-like isolation: the patient sees the payload, not ddp_doctor."""
    program = "import importlib.util as u; print(u.find_spec('ddp_doctor') is None)"
    root = payload.install_payload(tmp_path)
    (root / payload.PACKAGE / "probe_check.py").write_text(program + "\n")
    env = payload.patient_environment({"PATH": os.environ.get("PATH", "")}, root)
    done = subprocess.run(
        [sys.executable, "-S", "-m", f"{payload.PACKAGE}.probe_check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.stdout.strip() == "True", done.stderr


def test_run_in_patient_removes_its_folder() -> None:
    seen: list[str] = []

    def runner(argv, timeout_s, env, cwd):  # type: ignore[no-untyped-def]
        seen.append(cwd)
        from ddp_doctor.probes.runner import CommandResult

        return CommandResult(tuple(argv), 0, "{}", "", 0.0)

    run_in_patient(sys.executable, "torch_describe", 5.0, runner)
    assert seen and not Path(seen[0]).exists()


# --- the watchdog --------------------------------------------------------------------------
@pytest.mark.slow
def test_patient_process_dies_soon_after_the_doctor(tmp_path: Path) -> None:
    doctor = subprocess.Popen(["sleep", "60"])
    root = payload.install_payload(tmp_path)
    env = payload.patient_environment(dict(os.environ), root)
    env[payload.WATCH_VARIABLE] = payload.watch_token(doctor.pid)
    program = (
        f"from {payload.PACKAGE}.watchdog import watch_doctor\n"
        "import time\nassert watch_doctor()\nprint('watching', flush=True)\ntime.sleep(60)\n"
    )
    patient = subprocess.Popen(
        [sys.executable, "-c", program],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert patient.stdout is not None and patient.stdout.readline().strip() == "watching"
        doctor.kill()
        doctor.wait()
        killed_at = time.monotonic()
        code = patient.wait(timeout=10)
        assert code == -signal.SIGKILL and time.monotonic() - killed_at < 5
    finally:
        for process in (doctor, patient):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_no_watch_variable_means_no_watchdog() -> None:
    from ddp_doctor.patient.watchdog import watch_doctor

    assert watch_doctor({}) is False
    assert watch_doctor({payload.WATCH_VARIABLE: "junk"}) is False
