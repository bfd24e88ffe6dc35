"""The command line: run, diagnose, explain and rules, their output contract and exit codes.

Most runs are in-process (CliRunner) with torch and NVML faked at the probes' boundaries and
`--no-jobs`, so no torch import and no job launch; two runs are real subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fakes import FakeGpu, collect_torch_returning, fake_nvml_module

from ddp_doctor.probes import torch_info
from ddp_doctor.registry import all_rules, lookup

ROOT = Path(__file__).resolve().parent.parent
FACT_FIXTURES = ROOT / "fixtures" / "facts"
REPORT_KEYS = {
    "schema_version",
    "tool_version",
    "created",
    "command",
    "subject",
    "probes",
    "findings",
}
PROBE_KEYS = {"probe", "status", "duration_s", "facts", "error"}
FINDING_KEYS = {"code", "name", "severity", "message", "fix", "location", "evidence"}
USAGE = 2

Invoke = Callable[..., Result]


@pytest.fixture
def quick(invoke: Invoke, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """`ddp-doctor run --no-jobs ...` with a CPU torch and no NVIDIA driver, both faked."""
    monkeypatch.setattr(torch_info, "collect_torch", collect_torch_returning())
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml_module(init_error=12))

    def run(*args: str, **kwargs: Any) -> Result:
        return invoke("run", "--no-jobs", *args, **kwargs)

    return run


def report_of(result: Result) -> dict[str, Any]:
    assert "Traceback" not in result.output, result.output
    return json.loads(result.stdout)


def codes(result: Result) -> list[str]:
    return [f["code"] for f in report_of(result)["findings"]]


def findings(result: Result, code: str) -> list[dict[str, Any]]:
    return [f for f in report_of(result)["findings"] if f["code"] == code]


def assert_clean_usage_error(result: Result) -> None:
    """Exit 2, one error line on stderr, nothing on stdout, no traceback."""
    assert result.exit_code == USAGE, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("Error:", "ddp-doctor: error:"))]
    assert len(errors) == 1, result.stderr
    if errors[0].startswith("ddp-doctor: error:"):
        assert lines == errors  # the doctor's own errors are exactly one line


# --- the JSON report -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One real `run --format json --no-jobs` (the torch probe imports the real torch)."""
    from click.testing import CliRunner

    from ddp_doctor.cli import cli

    path = tmp_path_factory.mktemp("real") / "report.json"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_NCCL_"))}
    result = CliRunner().invoke(
        cli, ["run", "--no-jobs", "--format", "json", "--output", str(path)], env=keep
    )
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.output
    return path, json.loads(path.read_text())


@pytest.mark.slow
def test_run_json_has_exactly_the_schema(real_report: tuple[Path, dict[str, Any]]) -> None:
    _, document = real_report
    assert set(document) == REPORT_KEYS
    assert document["schema_version"] == 1
    assert document["probes"]
    for probe in document["probes"]:
        assert set(probe) == PROBE_KEYS
        assert probe["status"] in {"ok", "failed", "skipped", "crashed", "timed-out"}
        assert isinstance(probe["duration_s"], (int, float))
    assert {"env", "host", "nvml", "torch"} <= {p["probe"] for p in document["probes"]}
    for finding in document["findings"]:
        assert set(finding) == FINDING_KEYS
        assert finding["severity"] in {"info", "warning", "error"}


def test_diagnose_of_a_saved_run_gives_the_same_codes(
    real_report: tuple[Path, dict[str, Any]], invoke: Invoke
) -> None:
    path, document = real_report
    result = invoke("diagnose", str(path), "--format", "json")
    assert sorted(codes(result)) == sorted(f["code"] for f in document["findings"])


def test_json_stdout_is_only_json(quick: Invoke) -> None:
    result = quick("--format", "json")
    assert result.exit_code == 0, result.output
    assert set(report_of(result)) == REPORT_KEYS


# --- what the environment says ----------------------------------------------------------------


def test_malformed_cuda_visible_devices(quick: Invoke) -> None:
    result = quick("--format", "json", env={"CUDA_VISIBLE_DEVICES": "0,abc"})
    (finding,) = findings(result, "DDP020")
    assert finding["evidence"]["value"] == "0,abc"
    assert result.exit_code == 1


def test_deprecated_nccl_variable(quick: Invoke) -> None:
    env = {"NCCL_ASYNC_ERROR_HANDLING": "1"}
    result = quick("--format", "json", env=env)
    (finding,) = findings(result, "DDP009")
    assert finding["evidence"]["replacement"] == "TORCH_NCCL_ASYNC_ERROR_HANDLING"
    fix = finding["fix"]["text"] + " " + " ".join(finding["fix"]["commands"])
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in fix
    assert result.exit_code == 0
    assert quick("--format", "json", "--fail-on", "warning", env=env).exit_code == 1


def test_malformed_launcher_variables_are_findings_not_crashes(quick: Invoke) -> None:
    result = quick("--format", "json", env={"WORLD_SIZE": "abc", "LOCAL_RANK": "-1"})
    evidence = [
        (f["evidence"]["variable"], f["evidence"]["value"]) for f in findings(result, "DDP011")
    ]
    assert sorted(evidence) == [("LOCAL_RANK", "-1"), ("WORLD_SIZE", "abc")]
    assert result.exit_code == 0


def test_select_and_ignore(quick: Invoke) -> None:
    env = {"NCCL_ASYNC_ERROR_HANDLING": "1", "WORLD_SIZE": "abc"}
    assert set(codes(quick("--format", "json", "--select", "DDP009", env=env))) == {"DDP009"}
    ignored = codes(quick("--format", "json", "--ignore", "DDP0", env=env))
    assert not [c for c in ignored if c.startswith("DDP0")]


def test_require_gpu_without_gpu(quick: Invoke) -> None:
    result = quick("--format", "json", "--require-gpu")
    assert "DDP028" in codes(result)
    assert result.exit_code == 1


def test_skipped_nvml_never_fails_a_run(quick: Invoke) -> None:
    result = quick("--format", "json")
    nvml = next(p for p in report_of(result)["probes"] if p["probe"] == "nvml")
    assert nvml["status"] == "skipped" and nvml["error"]
    assert result.exit_code == 0


def test_more_ranks_than_gpus(quick: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [FakeGpu(uuid=f"GPU-5d0e1c3a-8b2f-4c71-9e6a-0f3b2d4c5a6{i}") for i in range(2)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml_module(*gpus))
    result = quick("--format", "json", "--nproc", "4")
    (finding,) = findings(result, "DDP027")
    assert (finding["evidence"]["ranks"], finding["evidence"]["visible_gpus"]) == (4, 2)


def test_topology_of_fake_gpus_without_a_job(
    quick: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = [FakeGpu(uuid=f"GPU-5d0e1c3a-8b2f-4c71-9e6a-0f3b2d4c5a6{i}") for i in range(2)]
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml_module(*gpus))
    document = report_of(quick("--format", "json"))
    topology = next(p for p in document["probes"] if p["probe"] == "topology")
    assert topology["status"] == "ok" and len(topology["facts"]["gpus"]) == 2
    assert topology["facts"]["under_load"] == "not sampled: no job ran (--no-jobs)"
    assert [(p["a"], p["b"]) for p in topology["facts"]["pairs"]] == [(0, 1)]
    assert "bandwidth" not in document  # no job, no bandwidth table


def test_no_driver_skips_the_topology_with_nvmls_reason(quick: Invoke) -> None:
    probes = {p["probe"]: p for p in report_of(quick("--format", "json"))["probes"]}
    assert probes["topology"]["status"] == "skipped"
    assert probes["nvml"]["error"] in probes["topology"]["error"]


@pytest.mark.parametrize(
    ("variables", "severity"),
    [
        ({"NCCL_P2P_DISABLE": "1"}, "warning"),
        ({"NCCL_ALGO": "Ring"}, "warning"),
        ({"NCCL_IB_DISABLE": "1"}, "info"),
        ({"NCCL_P2P_DISABLE": "0"}, None),
        ({"NCCL_SHM_DISABLE": "true"}, None),
    ],
)
def test_variables_that_switch_transports_off(
    quick: Invoke, variables: dict[str, str], severity: str | None
) -> None:
    found = findings(quick("--format", "json", env=variables), "DDP324")
    assert [f["severity"] for f in found] == ([severity] if severity else [])


def test_nvidia_ml_py_not_installed(quick: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    result = quick("--format", "json")
    nvml = next(p for p in report_of(result)["probes"] if p["probe"] == "nvml")
    assert nvml["status"] == "skipped" and nvml["error"]
    assert not [c for c in codes(result) if c.startswith("DDP9")]
    assert result.exit_code == 0


def test_table_and_markdown_formats(quick: Invoke) -> None:
    for fmt in ("table", "markdown"):
        result = quick("--format", fmt, env={"NCCL_BLOCKING_WAIT": "1"})
        assert (
            result.exit_code == 0 and "DDP009" in result.stdout and "Traceback" not in result.output
        )


def test_output_file(quick: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    result = quick("--format", "json", "--output", str(path))
    assert result.exit_code == 0 and result.stdout == ""
    assert set(json.loads(path.read_text())) == REPORT_KEYS


# --- bad input: a clear one-line message, exit 2, no traceback -------------------------------


@pytest.fixture
def never_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Usage errors must be reported before any probing starts."""

    def forbidden(*_: Any, **__: Any) -> None:
        raise AssertionError("probed despite a usage error")

    monkeypatch.setattr(torch_info, "collect_torch", forbidden)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--bogus"],
        ["run", "--select", "DDP999"],
        ["run", "--ignore", "not-a-rule"],
        ["run", "--format", "yaml"],
        ["run", "--fail-on", "fatal"],
        ["run", "--nproc", "0"],
        ["run", "--ops", "all_reduce,allreduce"],
        ["run", "--ops", ","],
        ["run", "--output", "/nonexistent-ddp-doctor-dir/sub/report.json"],
        ["diagnose"],
        ["diagnose", "--select", "DDP999", str(FACT_FIXTURES / "healthy-8xh100.json")],
        ["no-such-command"],
    ],
    ids=lambda args: " ".join(args[:3]),
)
def test_usage_errors(invoke: Invoke, never_probe: None, args: list[str]) -> None:
    assert_clean_usage_error(invoke(*args))


def test_output_that_is_a_directory(invoke: Invoke, never_probe: None, tmp_path: Path) -> None:
    assert_clean_usage_error(invoke("run", "--output", str(tmp_path)))
    report = str(FACT_FIXTURES / "healthy-8xh100.json")
    assert_clean_usage_error(invoke("diagnose", report, "--output", str(tmp_path)))


def _healthy() -> dict[str, Any]:
    return json.loads((FACT_FIXTURES / "healthy-8xh100.json").read_text())


def _with(change: Callable[[dict[str, Any]], Any]) -> str:
    document = _healthy()
    change(document)
    return json.dumps(document)


BAD_REPORTS = {
    "not-json": "ddp-doctor report\nprobes: host, nvml\n",
    "truncated": json.dumps(_healthy())[:500],
    "empty": "",
    "no-schema-version": _with(lambda d: d.pop("schema_version")),
    "wrong-schema-version": _with(lambda d: d.update(schema_version=99)),
    "probes-not-a-list": _with(lambda d: d.update(probes={"host": {}})),
    "facts-wrong-type": _with(lambda d: d["probes"][2].update(facts="Linux")),
    "fact-field-wrong-type": _with(lambda d: d["probes"][2]["facts"].update(cpu_count="many")),
    "unknown-status": _with(lambda d: d["probes"][2].update(status="exploded")),
    "a-list": "[]",
}


@pytest.mark.parametrize("name", sorted(BAD_REPORTS))
def test_diagnose_bad_reports(invoke: Invoke, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.json"
    path.write_text(BAD_REPORTS[name])
    assert_clean_usage_error(invoke("diagnose", str(path)))


def test_diagnose_binary_file(invoke: Invoke, tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    assert_clean_usage_error(invoke("diagnose", str(path)))


def test_diagnose_missing_file(invoke: Invoke, tmp_path: Path) -> None:
    assert_clean_usage_error(invoke("diagnose", str(tmp_path / "nowhere.json")))


def test_explain_unknown_code(invoke: Invoke) -> None:
    assert lookup("DDP999") is None
    assert_clean_usage_error(invoke("explain", "DDP999"))


def test_explain_by_code_and_by_name(invoke: Invoke) -> None:
    by_code = invoke("explain", "DDP009")
    by_name = invoke("explain", "deprecated-nccl-env")
    assert by_code.exit_code == 0 and by_code.stdout == by_name.stdout
    for part in ("What it finds:", "Why it matters:", "Example:", "Fix:"):
        assert part in by_code.stdout


def test_rules_json_lists_every_code(invoke: Invoke) -> None:
    result = invoke("rules", "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [row["code"] for row in rows] == [spec.code for spec in all_rules()]
    assert all(set(row) >= {"code", "name", "severity", "summary"} for row in rows)
    table = invoke("rules")
    assert all(spec.code in table.stdout for spec in all_rules())


# --- real processes ------------------------------------------------------------------------


def _ddp_doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddp_doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


def test_torch_that_does_not_import(tmp_path: Path) -> None:
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        'raise ImportError("libcudnn.so.9: cannot open shared object file: No such file")\n'
    )
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_NCCL_", "CUDA_"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")])
    process = _ddp_doctor("run", "--no-jobs", "--format", "json", env=env)
    assert "Traceback" not in process.stdout + process.stderr
    document = json.loads(process.stdout)
    torch = next(p for p in document["probes"] if p["probe"] == "torch")
    assert torch["status"] == "failed" and torch["facts"]["importable"] is False
    assert "DDP001" in [f["code"] for f in document["findings"]]
    assert process.returncode == 1


def test_help_version_explain_and_rules_never_import_torch() -> None:
    script = textwrap.dedent(
        """
        import contextlib, io, sys
        from ddp_doctor.cli import main
        for args in (["--help"], ["--version"], ["run", "--help"], ["diagnose", "--help"],
                     ["explain", "DDP001"], ["rules"], ["rules", "--format", "json"]):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    main(args)
                except SystemExit as exit:
                    assert exit.code in (0, None), (args, exit.code)
        print(sorted(m for m in sys.modules if m.split(".")[0] == "torch"))
        """
    )
    process = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip().splitlines()[-1] == "[]"


def test_a_real_usage_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text('{"schema_version": 1, "probes": "host"}')
    process = _ddp_doctor("diagnose", str(path))
    assert process.returncode == USAGE
    assert process.stdout == ""
    assert len(process.stderr.strip().splitlines()) == 1
    assert process.stderr.startswith("ddp-doctor: error:")
