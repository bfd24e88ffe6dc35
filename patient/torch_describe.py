"""Inside the patient: everything TorchFacts holds, read from the torch in this process.

Run as `python -m ddp_doctor_patient.torch_describe` (one JSON object on stdout); the job's
rank 0 calls `describe_torch()` in-process, where torch is imported already.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from .watchdog import watch_doctor


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
        "location": os.path.dirname(torch.__file__ or "") or None,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": _safely(torch.backends.cudnn.version),
        "arch_list": _safely(torch.cuda.get_arch_list) or [],
        "distributed_available": dist.is_available(),
        # the rest of what collect_env reports of torch itself
        "debug_build": bool(getattr(torch.version, "debug", False)),
        "xpu_available": bool(_safely(lambda: torch.xpu.is_available())),
        "xnnpack_available": bool(_safely(lambda: torch.backends.xnnpack.enabled)),
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
    watch_doctor()
    print(json.dumps(describe_torch()))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
