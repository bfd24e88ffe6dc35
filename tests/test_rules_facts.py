"""The facts rules (DDP0xx, DDP02x, DDP9xx) on recorded setups in fixtures/facts/.

Each fixture is a saved JSON report with two extra keys: "expect" (the codes that must fire)
and "description". Every DDP0xx / DDP901-904 code that is not expected must stay silent, so
each rule is seen both firing and silent. Tests look at codes, severities and evidence values,
never at message wording.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from click.testing import Result

from ddp_doctor.commands.explain import explain_text
from ddp_doctor.judge import judge
from ddp_doctor.model import Finding, Severity
from ddp_doctor.registry import RULES, all_rules, rules_judged
from ddp_doctor.report_io import load_report

FACT_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "facts"
FIXTURE_NAMES = sorted(path.stem for path in FACT_FIXTURES.glob("*.json"))
DOCTOR_CODES = ("DDP901", "DDP902", "DDP904")


def owned(code: str) -> bool:
    """The codes these fixtures judge: install/platform, devices, and the doctor itself."""
    return bool(re.fullmatch(r"DDP0\d\d", code)) or code in DOCTOR_CODES


OWNED_FACT_CODES = sorted(spec.code for spec in rules_judged("facts") if owned(spec.code))

# Rules that misbehave on a realistic fixture; the reason names the bug.
KNOWN_BUGS: dict[str, str] = {}

# Evidence the findings must carry, per fixture: (code, severity or None, evidence subset).
EVIDENCE: dict[str, list[tuple[str, Severity | None, dict[str, object]]]] = {
    "windows-laptop-1gpu": [
        ("DDP005", Severity.ERROR, {"torch": "2.5.1+cu124", "backend_requested": None}),
        ("DDP006", Severity.WARNING, {"torch": "2.5.1+cu124"}),
        ("DDP007", Severity.INFO, {}),
    ],
    "macos-laptop": [("DDP005", Severity.INFO, {"torch": "2.5.1"})],
    "docker-small-shm": [
        ("DDP008", Severity.WARNING, {"shm_bytes": 64 * 1024**2, "container": "docker"})
    ],
    "cpu-wheel-on-gpu-host": [
        ("DDP002", Severity.ERROR, {"torch": "2.5.1+cpu", "gpus": 2}),
        ("DDP005", Severity.ERROR, {"torch": "2.5.1+cpu"}),
    ],
    "driver-too-old": [
        (
            "DDP003",
            Severity.ERROR,
            {"torch_cuda": "12.4", "driver_cuda": "11.4", "driver": "470.223.02"},
        )
    ],
    "arch-missing-sm120": [("DDP004", Severity.ERROR, {"gpu": 0, "capability": "sm_120"})],
    "cvd-missing-index": [
        ("DDP020", Severity.ERROR, {"value": "0,1,8", "visible_count": 2}),
    ],
    "cvd-malformed": [("DDP020", Severity.ERROR, {"value": "0,abc", "visible_count": 1})],
    "cvd-uuid-unknown": [("DDP020", Severity.ERROR, {"visible_count": 0})],
    "cvd-hides-all": [("DDP020", Severity.INFO, {"value": ""})],
    "device-count-mismatch": [
        ("DDP021", Severity.ERROR, {"torch": 6, "nvml": 8, "visible": 8}),
    ],
    "mixed-models-no-order": [
        (
            "DDP022",
            Severity.WARNING,
            {
                "models": ["NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 4090"],
                "cuda_device_order": None,
            },
        )
    ],
    "mig-enabled": [("DDP023", Severity.WARNING, {"gpus": [0]})],
    "mig-enabled-2gpu": [("DDP023", Severity.WARNING, {"gpus": [0, 1]})],
    "exclusive-process": [
        ("DDP024", Severity.WARNING, {"gpu": 0, "mode": "exclusive-process"}),
        ("DDP024", Severity.WARNING, {"gpu": 1, "mode": "exclusive-process"}),
    ],
    "ecc-errors": [("DDP025", Severity.ERROR, {"gpu": 5, "errors": 2})],
    "gpu-memory-taken": [
        ("DDP026", Severity.ERROR, {"gpu": 0, "pids": [48213]}),
        ("DDP026", Severity.WARNING, {"gpu": 1, "pids": [48214]}),
    ],
    "nproc-above-gpus": [
        ("DDP027", Severity.ERROR, {"ranks": 8, "visible_gpus": 4, "source": "--nproc"})
    ],
    "deprecated-nccl-env": [
        (
            "DDP009",
            Severity.WARNING,
            {
                "variable": "NCCL_ASYNC_ERROR_HANDLING",
                "value": "1",
                "replacement": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            },
        ),
        (
            "DDP009",
            Severity.WARNING,
            {"variable": "NCCL_BLOCKING_WAIT", "replacement": "TORCH_NCCL_BLOCKING_WAIT"},
        ),
    ],
    "launch-env-invalid": [
        ("DDP011", Severity.WARNING, {"variable": "WORLD_SIZE", "value": "abc"}),
        ("DDP011", Severity.WARNING, {"variable": "LOCAL_RANK", "value": "-1"}),
    ],
    "jupyter-kernel": [("DDP010", Severity.WARNING, {})],
    "container-without-gpus-docker": [
        (
            "DDP029",
            Severity.WARNING,
            {
                "container": "docker",
                "device_nodes": [],
                "nvml": "no NVIDIA driver: NVML Shared Library Not Found",
                "nvidia_visible_devices": "all",
                "shm_bytes": 64 * 1024**2,
            },
        )
    ],
    "container-without-gpus-kubernetes": [
        ("DDP029", Severity.WARNING, {"container": "kubernetes", "shm_bytes": None})
    ],
    "container-without-gpus-podman": [
        (
            "DDP029",
            Severity.WARNING,
            {"container": "podman", "device_nodes": ["nvidia-uvm", "nvidia0", "nvidiactl"]},
        )
    ],
    "torch-import-fails": [("DDP001", Severity.ERROR, {})],
    "probe-crashed": [("DDP901", Severity.WARNING, {"probe": "nvml"})],
    "probe-timed-out": [("DDP902", Severity.WARNING, {"probe": "nvml", "seconds": 20.0})],
    "probe-failed": [("DDP904", Severity.WARNING, {"probe": "nvml"})],
}


def load(name: str) -> dict:
    return json.loads((FACT_FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def findings_for(name: str) -> list[Finding]:
    report = load_report(FACT_FIXTURES / f"{name}.json")
    return judge(report.probes)


def owned_codes(findings: Iterable[Finding]) -> set[str]:
    """Codes of these blocks; a DDP903 counts when the rule that crashed is one of them."""
    return {
        f.code
        for f in findings
        if owned(f.code) and (f.code != "DDP903" or owned(str(f.evidence.get("rule"))))
    }


def fixture_params() -> list:
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name])]
            if name in KNOWN_BUGS
            else [],
        )
        for name in FIXTURE_NAMES
    ]


def test_there_are_recorded_setups() -> None:
    assert len(FIXTURE_NAMES) >= 25


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_is_a_report_with_expectations(name: str) -> None:
    document = load(name)
    assert document["schema_version"] == 1
    assert isinstance(document["description"], str) and document["description"]
    assert all(owned(code) and code in RULES for code in document["expect"]), document["expect"]
    assert {p["probe"] for p in document["probes"]} >= {"plan", "env", "host", "nvml", "torch"}


@pytest.mark.parametrize("name", fixture_params())
def test_expected_codes_fire_and_no_others(name: str) -> None:
    expected = set(load(name)["expect"])
    fired = owned_codes(findings_for(name))
    assert fired == expected, f"missing {expected - fired}, unexpected {fired - expected}"


@pytest.mark.parametrize("name", sorted(EVIDENCE))
def test_findings_carry_the_evidence(name: str) -> None:
    findings = findings_for(name)
    for code, severity, evidence in EVIDENCE[name]:
        matches = [
            f
            for f in findings
            if f.code == code and all(f.evidence.get(k) == v for k, v in evidence.items())
        ]
        assert matches, f"no {code} with evidence {evidence} in {[f.evidence for f in findings]}"
        if severity is not None:
            assert {f.severity for f in matches} == {severity}


def test_findings_name_their_rule_and_fix() -> None:
    for name in FIXTURE_NAMES:
        for finding in findings_for(name):
            spec = RULES[finding.code]
            assert finding.name == spec.name
            assert finding.fix is not None and finding.fix.text


def test_unavailable_gpu_evidence_is_the_probe_error() -> None:
    document = load("require-gpu-no-gpu")
    nvml_error = next(p["error"] for p in document["probes"] if p["probe"] == "nvml")
    (finding,) = [f for f in findings_for("require-gpu-no-gpu") if f.code == "DDP028"]
    assert finding.evidence == {"nvml": nvml_error}


def test_import_error_is_the_evidence() -> None:
    document = load("torch-import-fails")
    torch = next(p for p in document["probes"] if p["probe"] == "torch")
    assert torch["status"] == "failed" and torch["facts"]["importable"] is False
    (finding,) = [f for f in findings_for("torch-import-fails") if f.code == "DDP001"]
    assert finding.evidence == {"error": torch["facts"]["import_error"]}


@pytest.mark.parametrize(
    ("name", "runtime_fix", "shm_fix"),
    [
        ("container-without-gpus-docker", "docker run --rm --gpus all", "--ipc=host"),
        ("container-without-gpus-podman", "nvidia-ctk cdi list", "--ipc=host"),
        ("container-without-gpus-kubernetes", "nvidia.com/gpu", None),
    ],
)
def test_container_without_gpus_is_fixed_the_way_its_runtime_does_it(
    invoke, name: str, runtime_fix: str, shm_fix: str | None
) -> None:  # type: ignore[no-untyped-def]
    """Through `ddp-doctor diagnose`, as a user replays a saved report: DDP029 with the runtime's
    own way of passing GPUs in, and --ipc=host in the same advice when /dev/shm is small."""
    result: Result = invoke("diagnose", str(FACT_FIXTURES / f"{name}.json"), "--format", "json")
    assert result.exit_code == 0, result.output
    (finding,) = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "DDP029"]
    fix = finding["fix"]["text"] + " ".join(finding["fix"]["commands"])
    assert runtime_fix in fix
    assert (shm_fix in fix) if shm_fix else ("/dev/shm" not in fix)


def test_healthy_node_has_nothing_at_warning_or_above() -> None:
    for name in ("healthy-8xh100", "inside-torchrun-8xh100", "wsl2-workstation", "cvd-uuid-valid"):
        assert [f for f in findings_for(name) if f.severity >= Severity.WARNING] == []


# --- meta: every rule is exercised, and documented -----------------------------------------


def test_every_owned_facts_rule_fires_somewhere_and_is_silent_somewhere() -> None:
    fired_in: dict[str, set[str]] = {code: set() for code in OWNED_FACT_CODES}
    for name in FIXTURE_NAMES:
        for code in owned_codes(findings_for(name)):
            fired_in.setdefault(code, set()).add(name)
    for code in OWNED_FACT_CODES:
        assert fired_in[code], f"{code} fires in no fixture"
        assert fired_in[code] != set(FIXTURE_NAMES), f"{code} fires in every fixture"


def test_a_rule_that_raises_becomes_ddp903(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(facts: object) -> Iterable:
        raise KeyError("gpus")

    monkeypatch.setitem(RULES, "DDP022", dataclasses.replace(RULES["DDP022"], check=broken))
    findings = findings_for("mixed-models-no-order")
    crashes = [f for f in findings if f.code == "DDP903"]
    assert [f.evidence for f in crashes] == [{"rule": "DDP022"}]
    assert crashes[0].severity is Severity.WARNING
    assert "DDP022" not in {f.code for f in findings}
    # The other rules still ran and still fire.
    windows = findings_for("windows-laptop-1gpu")
    assert owned_codes(windows) == {"DDP005", "DDP006", "DDP007"}
    assert "DDP903" in {f.code for f in windows}


def test_no_facts_rule_crashes_on_a_recorded_setup() -> None:
    """Any block's facts rule, not only these: a DDP903 on a real setup is a bug somewhere."""
    crashed = {
        (name, str(f.evidence.get("rule")))
        for name in FIXTURE_NAMES
        for f in findings_for(name)
        if f.code == "DDP903"
    }
    assert not crashed, sorted(crashed)


@pytest.mark.parametrize("code", [spec.code for spec in all_rules()])
def test_every_rule_explains_itself_in_four_parts(code: str) -> None:
    spec = RULES[code]
    text = explain_text(spec)
    positions = [text.find(part) for part in ("What it finds:", "Why it matters:", "Example:")]
    assert all(p >= 0 for p in positions), f"{code}: explain text lacks a part"
    assert positions == sorted(positions)
    assert spec.doc.count("Fix:") >= 1 and text.rindex("Fix:") > positions[-1]
    assert spec.summary and spec.fix.text


def test_diagnose_replays_every_fixture(invoke) -> None:  # type: ignore[no-untyped-def]
    for name in FIXTURE_NAMES:
        if name in KNOWN_BUGS:
            continue
        result: Result = invoke("diagnose", str(FACT_FIXTURES / f"{name}.json"), "--format", "json")
        assert result.exit_code in (0, 1), result.output
        findings = [Finding.from_json(f) for f in json.loads(result.stdout)["findings"]]
        assert owned_codes(findings) == set(load(name)["expect"]), name
        worst_is_error = any(f.severity is Severity.ERROR for f in findings)
        assert result.exit_code == (1 if worst_is_error else 0)


def test_torch_missing_from_the_chosen_python_names_it_and_the_candidates() -> None:
    """DDP001 for a Python without torch: which Python, why it was picked, and `--python` for
    each environment found with torch (not "reinstall torch")."""
    from ddp_doctor.facts.machine import PythonCandidate, PythonFacts, TorchFacts
    from ddp_doctor.judge import judge
    from ddp_doctor.model import ProbeResult, ProbeStatus

    venv = PythonCandidate(
        "/home/user/project/.venv/bin/python", ".venv in the working folder", True
    )
    conda = PythonCandidate("/opt/conda/envs/x/bin/python", "CONDA_PREFIX", True)
    bare = PythonCandidate("/opt/other/bin/python", "VIRTUAL_ENV", False)
    python = PythonFacts(
        "/usr/bin/python3", "python3 on PATH", version="3.11.2", candidates=(venv, conda, bare)
    )
    torch = TorchFacts(
        importable=False, import_error="No module named 'torch' in '/usr/bin/python3'"
    )
    probes = (
        ProbeResult("python", ProbeStatus.OK, python, 0.0),
        ProbeResult("torch", ProbeStatus.FAILED, torch, 0.0),
    )
    (finding,) = [f for f in judge(probes) if f.code == "DDP001"]
    assert finding.evidence["python"] == "/usr/bin/python3"
    assert finding.evidence["chosen_by"] == "python3 on PATH"
    assert finding.fix is not None
    assert f"--python {venv.executable}" in finding.fix.text
    assert f"--python {bare.executable}" not in finding.fix.text
    assert finding.fix.commands == (
        ". /home/user/project/.venv/bin/activate",
        "conda activate /opt/conda/envs/x",
    )
