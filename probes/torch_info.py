"""Torch facts, gathered in a child process so that a broken torch cannot take the doctor down.

Run as `python -m ddp_doctor.probes.torch_info`: prints one JSON object on stdout. The job's
worker calls `describe_torch()` in-process, where torch is imported already.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from ddp_doctor.codec import CodecError, from_jsonable
from ddp_doctor.facts import TorchFacts

from .base import ProbeFailed, ProbeTimedOut
from .runner import CommandResult, run_command

Runner = Callable[..., CommandResult]


def collect_torch(timeout_s: float = 30.0, runner: Runner = run_command) -> TorchFacts:
    result = runner([sys.executable, "-m", "ddp_doctor.probes.torch_info"], timeout_s=timeout_s)
    if result.timed_out:  # slow is not broken: DDP902 says so, not DDP001
        raise ProbeTimedOut(f"importing torch took longer than {timeout_s:g} s")
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
        facts = from_jsonable(TorchFacts, data)
    except (IndexError, ValueError, CodecError):
        error = _last_error_line(result.stderr) or f"exit code {result.returncode}"
        raise ProbeFailed(
            f"torch could not be inspected: {error}",
            TorchFacts(importable=False, import_error=error),
        ) from None
    if not facts.importable:
        raise ProbeFailed(f"torch does not import: {facts.import_error}", facts)
    return facts


def _last_error_line(stderr: str) -> str | None:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else None


def describe_torch() -> dict[str, Any]:
    """Everything TorchFacts holds, read from the torch in this process."""
    try:
        import torch
    except BaseException as error:  # an ImportError, or an OSError from a missing libcudart
        return {"importable": False, "import_error": f"{type(error).__name__}: {error}"}
    import torch.distributed as dist

    facts: dict[str, Any] = {
        "importable": True,
        "version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": _safely(torch.backends.cudnn.version),
        "arch_list": _safely(torch.cuda.get_arch_list) or [],
        "distributed_available": dist.is_available(),
    }
    if dist.is_available():
        facts["nccl_available"] = dist.is_nccl_available()
        facts["gloo_available"] = dist.is_gloo_available()
    facts.update(_cuda_facts(torch))
    if facts.get("nccl_available"):
        version = _safely(torch.cuda.nccl.version)
        facts["nccl_version"] = ".".join(map(str, version)) if isinstance(version, tuple) else None
    return facts


def _cuda_facts(torch: Any) -> dict[str, Any]:
    try:
        if not torch.cuda.is_available():
            return {"cuda_available": False, "device_count": 0}
        devices = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "index": index,
                    "name": props.name,
                    "capability": [props.major, props.minor],
                    "total_memory_bytes": props.total_memory,
                }
            )
        return {"cuda_available": True, "device_count": len(devices), "devices": devices}
    except Exception as error:
        return {"cuda_available": False, "cuda_error": f"{type(error).__name__}: {error}"}


def _safely(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:
        return None


def main() -> None:
    print(json.dumps(describe_torch()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
