"""The torch probe through a fake runner (no torch import), and once for real."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
from fakes import torch_json, torch_runner

from ddp_doctor.engine import Probe, run_probe
from ddp_doctor.facts.machine import TorchFacts
from ddp_doctor.model import ProbeStatus
from ddp_doctor.probes.base import ProbeFailed
from ddp_doctor.probes.torch_info import collect_torch

CU124 = {
    "importable": True,
    "version": "2.5.1+cu124",
    "cuda_version": "12.4",
    "hip_version": None,
    "cudnn_version": 90100,
    "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
    "distributed_available": True,
    "nccl_available": True,
    "gloo_available": True,
    "cuda_available": True,
    "device_count": 2,
    "devices": [
        {
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "capability": [9, 0],
            "total_memory_bytes": 84943978496,
        }
        for i in range(2)
    ],
    "nccl_version": "2.21.5",
}
IMPORT_ERROR = (
    "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory"
)


def probe_result(runner):  # type: ignore[no-untyped-def]
    return run_probe(Probe("torch", lambda: collect_torch(timeout_s=5.0, runner=runner), 5.0))


def test_the_child_runs_the_patients_python_from_the_payload() -> None:
    seen: dict = {}

    def runner(argv, timeout_s, env, cwd):  # type: ignore[no-untyped-def]
        first_path = env["PYTHONPATH"].split(os.pathsep)[0]
        seen.update(
            argv=list(argv),
            timeout_s=timeout_s,
            payload=sorted(p.name for p in (Path(first_path) / "ddp_doctor_patient").iterdir()),
            doctor_on_path=any("site-packages" in p for p in env["PYTHONPATH"].split(os.pathsep)),
        )
        return torch_runner(torch_json(**CU124))(argv, timeout_s)

    collect_torch("/opt/patient/bin/python", timeout_s=7.5, runner=runner)
    assert seen["argv"] == ["/opt/patient/bin/python", "-m", "ddp_doctor_patient.torch_describe"]
    assert seen["timeout_s"] == 7.5
    assert "torch_describe.py" in seen["payload"] and "__init__.py" in seen["payload"]
    assert not seen["doctor_on_path"]


def test_cuda_build_facts() -> None:
    facts = collect_torch(runner=torch_runner(torch_json(**CU124)))
    assert facts.version == "2.5.1+cu124"
    assert facts.cuda_version == "12.4"
    assert facts.arch_list[-1] == "sm_90"
    assert facts.devices[1].capability == (9, 0)
    assert facts.nccl_version == "2.21.5"
    assert facts.major_minor == (2, 5)


def test_noise_before_the_json_line_is_ignored() -> None:
    stdout = "UserWarning: something torch printed\n" + torch_json(**CU124)
    assert collect_torch(runner=torch_runner(stdout)).device_count == 2


def test_import_error_fails_with_the_error_as_facts() -> None:
    runner = torch_runner(torch_json(importable=False, import_error=IMPORT_ERROR))
    with pytest.raises(ProbeFailed) as caught:
        collect_torch(runner=runner)
    assert caught.value.facts == TorchFacts(importable=False, import_error=IMPORT_ERROR)
    result = probe_result(runner)
    assert result.status is ProbeStatus.FAILED
    assert result.facts.importable is False and result.facts.import_error == IMPORT_ERROR


def test_timed_out_import_is_a_timeout_not_a_broken_torch() -> None:
    """Slow is not broken: DDP902 reports it, DDP001 must not."""
    result = probe_result(torch_runner(returncode=None))
    assert result.status is ProbeStatus.TIMED_OUT and result.error
    assert result.facts is None


@pytest.mark.parametrize(
    ("stdout", "stderr", "returncode"),
    [
        ("", "Segmentation fault (core dumped)\n", -11),
        ("not json at all\n", "", 0),
        ("", "", 1),
        ('{"importable": true, "version": 2.5}\n', "", 0),
        ('{"importable": "yes"}\n', "", 0),
        ("[1, 2, 3]\n", "", 0),
    ],
    ids=["segfault", "garbage", "silent-exit", "wrong-type", "wrong-bool", "not-an-object"],
)
def test_garbage_output_fails_with_facts(stdout: str, stderr: str, returncode: int) -> None:
    result = probe_result(torch_runner(stdout, stderr, returncode))
    assert result.status is ProbeStatus.FAILED, result
    assert result.facts.importable is False and result.facts.import_error


def test_last_stderr_line_is_the_error() -> None:
    stderr = "Traceback (most recent call last):\n  File ...\n" + IMPORT_ERROR + "\n\n"
    result = probe_result(torch_runner("", stderr, 1))
    assert result.facts.import_error == IMPORT_ERROR


@pytest.mark.slow
def test_real_torch_once() -> None:
    facts = collect_torch(timeout_s=60.0)
    installed = importlib.metadata.version("torch")
    assert facts.importable is True
    assert facts.version == installed
    assert facts.distributed_available is True
    assert facts.gloo_available is True
    if installed.endswith("+cpu"):
        assert facts.cuda_version is None
        assert facts.nccl_available is False and facts.nccl_version is None
        assert facts.cuda_available is False and facts.device_count == 0
        assert facts.arch_list == ()
