"""The distribution as a user gets it: a wheel built with `python -m build`, installed into a
fresh virtualenv that has no torch. check, logs, explain and rules work there; `run --python`
examines another interpreter's torch and runs the job in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real jobs, subprocess runs or wheel builds

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _run(argv: list[str], timeout: float = 300, **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


@pytest.fixture(scope="module")
def fresh_doctor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `ddp-doctor` script of a clean venv holding only the wheel and its dependencies."""
    folder = tmp_path_factory.mktemp("install")
    built = _run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(folder)],
        cwd=ROOT,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(folder.glob("ddp_doctor-*.whl"))
    target = folder / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    python = target / "bin" / "python"
    installed = _run([str(python), "-m", "pip", "install", "-q", str(wheel)])
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert _run([str(python), "-c", "import torch"]).returncode != 0, "the venv must lack torch"
    return target / "bin" / "ddp-doctor"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}


FAULT_HOOK_MARKS = ("test_fault", "test-fault", "extra_modules", "job_faults", "TEST_FAULT")


def test_wheel_ships_no_test_code(fresh_doctor: Path) -> None:
    """No fault injector, and no hook or hidden flag for one (tests/job_hook brings its own)."""
    site = next((fresh_doctor.parent.parent / "lib").glob("python*/site-packages/ddp_doctor"))
    shipped = {p.name for p in site.rglob("*.py")}
    assert "job_faults.py" not in shipped and "sitecustomize.py" in shipped  # trace's own shim
    assert {"worker.py", "__main__.py"} <= shipped
    marked = {
        f"{path.relative_to(site)}: {mark}"
        for path in site.rglob("*")
        if path.is_file() and path.suffix in (".py", ".json", ".txt", ".typed", "")
        for mark in FAULT_HOOK_MARKS
        if mark in path.read_text(encoding="utf-8", errors="replace")
    }
    assert marked == set()


def test_static_commands_work_without_torch(fresh_doctor: Path) -> None:
    script = FIXTURES / "scripts" / "DDP113_set_epoch_missing.py"
    checked = _run([str(fresh_doctor), "check", "--format", "json", str(script)])
    assert checked.returncode == 1 and "DDP113" in checked.stdout
    log = next((FIXTURES / "logs").glob("*.log"))
    logged = _run([str(fresh_doctor), "logs", "--format", "json", str(log)])
    assert logged.returncode in (0, 1) and json.loads(logged.stdout)["findings"] is not None
    explained = _run([str(fresh_doctor), "explain", "DDP113"])
    assert explained.returncode == 0 and "DDP113" in explained.stdout
    listed = _run([str(fresh_doctor), "rules", "--format", "json"])
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) > 50


def test_run_examines_the_python_it_is_pointed_at(fresh_doctor: Path) -> None:
    done = _run(
        [
            str(fresh_doctor),
            "run",
            "--python",
            sys.executable,
            "--format",
            "json",
            "--timeout",
            "90",
            "--sizes",
            "1K:4K:4",
            "--iters",
            "1",
        ],
        env=_clean_env(),
        timeout=150,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    probes = {p["probe"]: p for p in json.loads(done.stdout)["probes"]}
    redacted = sys.executable.replace(str(Path.home()), "~", 1)  # json output hides the home
    assert probes["python"]["facts"]["executable"] in (sys.executable, redacted)
    assert probes["python"]["facts"]["chosen_by"] == "--python"
    assert probes["job"]["status"] == "ok" and probes["job"]["facts"]["exit_code"] == 0
    assert probes["torch"]["facts"]["importable"] is True


def test_run_without_torch_anywhere_names_ddp001(fresh_doctor: Path) -> None:
    python = fresh_doctor.parent / "python"
    done = _run(
        [str(fresh_doctor), "run", "--python", str(python), "--format", "json"],
        env=_clean_env(),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert "DDP001" in {f["code"] for f in report["findings"]}
    assert {p["probe"]: p["status"] for p in report["probes"]}["job"] == "skipped"
