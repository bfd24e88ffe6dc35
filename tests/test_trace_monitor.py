"""The patient side of `trace` without a job: the recorder's journal and ring, the hook that
waits for `import torch`, and the sitecustomize shim that chains to the user's own."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_doctor.patient.journal import read_journal
from ddp_doctor.patient.trace import monitor as trace_monitor
from ddp_doctor.patient.trace.recorder import Recorder, TraceBound
from ddp_doctor.probes.trace.journals import read_ring

PROBES = Path(trace_monitor.__file__).resolve().parent
SHIM = PROBES / "sitecustomize.py"


def test_first_collectives_go_to_the_journal_and_the_last_to_the_ring(tmp_path: Path) -> None:
    (tmp_path / "ranks").mkdir()
    recorder = Recorder(tmp_path, {"keep": 3})
    for seq in range(1, 11):
        recorder.collective_started({"op": "all_reduce", "seq": seq, "group": "0"})
        recorder.collective_done()
    journal = read_journal(Path(f"{recorder.stem}.jsonl"))
    assert [r["seq"] for r in journal if r["event"] == "collective"] == [1, 2, 3]
    assert [r["seq"] for r in read_ring(Path(f"{recorder.stem}.ring"))] == [8, 9, 10]
    recorder.write_progress()
    progress = json.loads(Path(f"{recorder.stem}.progress").read_text())
    assert (progress["completed"], progress["written"], progress["pending"]) == (10, 10, None)


def test_the_bound_exits_with_zero() -> None:
    with pytest.raises(SystemExit) as stopped:
        raise TraceBound("steps 3")
    assert stopped.value.code == 0


def test_the_callback_runs_once_the_module_has_been_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "late_module.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[object] = []
    trace_monitor.when_imported("late_module", seen.append)
    assert seen == []
    try:
        import late_module  # type: ignore[import-not-found]

        assert seen == [late_module] and late_module.VALUE == 42
        assert type(late_module.__loader__).__name__ != "_ThenCall"  # its own loader
    finally:
        sys.modules.pop("late_module", None)


def test_the_shim_imports_only_the_standard_library() -> None:
    tree = ast.parse(SHIM.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] in sys.stdlib_module_names


def test_the_shim_chains_to_the_users_sitecustomize(tmp_path: Path) -> None:
    inject, user = tmp_path / "inject", tmp_path / "user"
    inject.mkdir()
    user.mkdir()
    (inject / "sitecustomize.py").write_text(SHIM.read_text())
    (user / "sitecustomize.py").write_text("USERS = True\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "DDP_DOCTOR_TRACE")}
    env["PYTHONPATH"] = os.pathsep.join([str(inject), str(user)])
    done = subprocess.run(
        [sys.executable, "-c", "import sitecustomize as s; print(s.__file__, s.USERS)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.stdout.split() == [str(user / "sitecustomize.py"), "True"], done.stderr
