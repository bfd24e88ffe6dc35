"""GPU tests run only with `pytest -m gpu` and skip where CUDA is missing.

torch is imported lazily, inside the fixture, so that collecting these tests on a CPU machine
costs nothing.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        pytest.skip("no CUDA GPU here")
    if not torch.distributed.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    return torch.cuda.device_count()
