"""`ddp-doctor trace` on real NCCL jobs: the GPU-only mistakes (fixtures/trace/gpu) found as
the recorded journals of fixtures/trace/recorded predict. Run with `pytest -m gpu`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from tracing import TRACE_FIXTURES, assert_nothing_left, expected_markers, trace

pytestmark = pytest.mark.gpu
GPU_FIXTURES = TRACE_FIXTURES / "gpu"


@dataclass(frozen=True)
class GpuCase:
    script: str
    gpus: int  # GPUs the mistake needs
    launcher: tuple[str, ...] = ("torchrun", "--nproc-per-node", "2")
    without_line: frozenset[str] = frozenset()
    needs_folder: bool = False


CASES = [
    GpuCase("ddp_output_device.py", gpus=2),
    GpuCase("shared_gpu.py", gpus=1, without_line=frozenset({"DDP305"})),
    GpuCase("dataparallel_model_elsewhere.py", gpus=2, launcher=("python",)),
    GpuCase("load_onto_gpu0.py", gpus=2, needs_folder=True),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.script.removesuffix(".py"))
def test_gpu_trace_fixture(case: GpuCase, gpu_count: int, tmp_path: Path) -> None:
    if gpu_count < case.gpus:
        pytest.skip(f"needs {case.gpus} GPUs, {gpu_count} here")
    script = GPU_FIXTURES / case.script
    args = [str(tmp_path)] if case.needs_folder else []
    traced = trace(tmp_path, [*case.launcher, str(script), *args], "--timeout", "180")
    assert traced.at_lines(script) == expected_markers(script), traced.findings
    assert traced.without_location() >= case.without_line, traced.findings
    assert_nothing_left(tmp_path)
