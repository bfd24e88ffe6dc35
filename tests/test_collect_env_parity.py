"""collect_env parity: every field `python -m torch.utils.collect_env` reports is in the
report (the collect_env probe, the torch probe, NVML), read from the patient Python; compared
field by field with collect_env's own get_env_info() on this machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddp_doctor.facts.machine import CollectEnvFacts, TorchFacts
from ddp_doctor.probes.collect_env import collect_collect_env
from ddp_doctor.probes.torch_info import collect_torch

# collect_env's fields and where the report has each (the NVML probe has the driver and GPUs)
WHERE = {
    "torch_version": "torch.version",
    "is_debug_build": "torch.debug_build",
    "cuda_compiled_version": "torch.cuda_version",
    "gcc_version": "collect_env.gcc",
    "clang_version": "collect_env.clang",
    "cmake_version": "collect_env.cmake",
    "os": "collect_env.os",
    "libc_version": "collect_env.libc",
    "python_version": "collect_env.python_build",
    "python_platform": "collect_env.python_platform",
    "is_cuda_available": "torch.cuda_available",
    "cuda_runtime_version": "collect_env.nvcc",
    "cuda_module_loading": "collect_env.allocator",
    "nvidia_driver_version": "nvml.driver_version",
    "nvidia_gpu_models": "nvml.gpus",
    "cudnn_version": "torch.cudnn_version",
    "is_xpu_available": "torch.xpu_available",
    "pip_version": "collect_env.pip_packages",
    "pip_packages": "collect_env.pip_packages",
    "conda_packages": "collect_env.conda_packages",
    "hip_compiled_version": "torch.hip_version",
    "hip_runtime_version": "torch.hip_version",
    "miopen_runtime_version": "torch.hip_version",
    "caching_allocator_config": "collect_env.allocator",
    "is_xnnpack_available": "torch.xnnpack_available",
    "cpu_info": "collect_env.lscpu",
}


@pytest.fixture(scope="module")
def theirs() -> dict[str, object]:
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", "import json; from torch.utils import collect_env; "
         "print(json.dumps(collect_env.get_env_info()._asdict()))"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ours() -> tuple[CollectEnvFacts, TorchFacts]:
    return collect_collect_env(sys.executable), collect_torch(sys.executable, timeout_s=120)


@pytest.mark.slow
def test_every_collect_env_field_has_a_place_in_the_report(theirs: dict[str, object]) -> None:
    assert set(theirs) <= set(WHERE), sorted(set(theirs) - set(WHERE))
    for place in WHERE.values():
        probe, field = place.split(".")
        kind = {"collect_env": CollectEnvFacts, "torch": TorchFacts}.get(probe)
        if kind is not None:
            assert field in kind.__dataclass_fields__, place


@pytest.mark.slow
def test_the_values_agree_with_collect_env_on_this_machine(theirs, ours) -> None:  # type: ignore[no-untyped-def]
    env, torch = ours
    assert env.gcc == theirs["gcc_version"] and env.clang == theirs["clang_version"]
    assert env.cmake == theirs["cmake_version"] and env.nvcc == theirs["cuda_runtime_version"]
    assert env.os == theirs["os"] and env.libc == theirs["libc_version"]
    assert env.python_build == theirs["python_version"]
    assert env.python_platform == theirs["python_platform"]
    pip_lines = set(str(theirs["pip_packages"] or "").splitlines())
    assert {f"{name}=={version}" for name, version in env.pip_packages.items()} == pip_lines
    assert (env.conda_packages is None) == (not theirs["conda_packages"])
    configured = {k: v for k, v in dict(theirs["caching_allocator_config"] or {}).items() if v}
    assert configured.items() <= env.allocator.items()
    lscpu = {}
    for line in str(theirs["cpu_info"] or "").splitlines():
        key, _, value = line.partition(":")
        if value:
            lscpu[key.strip()] = value.strip()
    assert env.lscpu == lscpu
    assert env.cpu_model == lscpu.get("Model name")
    assert torch.version == theirs["torch_version"]
    assert str(torch.debug_build) == str(theirs["is_debug_build"])
    assert (torch.cuda_version or "None") == str(theirs["cuda_compiled_version"])
    assert str(torch.cuda_available) == str(theirs["is_cuda_available"])
    assert str(torch.xpu_available) == str(theirs["is_xpu_available"])
    assert str(torch.xnnpack_available) == str(theirs["is_xnnpack_available"])
    assert (torch.hip_version or "N/A") == str(theirs["hip_compiled_version"])


def test_collect_env_facts_fail_as_a_fact_not_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ddp_doctor.probes.base import ProbeFailed

    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho nothing useful\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ProbeFailed):
        collect_collect_env(str(broken))
