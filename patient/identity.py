"""Who each rank is, gathered to rank 0: host, pid, device, PCI bus id, and the fingerprint
that must agree across nodes (Python, torch version and git hash, CUDA runtime, driver, GPU
model, the NCCL version loaded and every libnccl mapped into the process, and the NCCL_*,
TORCH_NCCL_*, GLOO_* and CUDA_* variables).

The gather goes through the job's TCPStore, not a collective, so it still works when the
backend's communicator is broken (two ranks on one GPU make NCCL fail).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
from datetime import timedelta
from typing import Any

KEY = "ddp_doctor/identity/{}"
FINGERPRINT_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "CUDA_")


def describe_rank(
    torch: Any, rank: int, world_size: int, local_rank: int, device: Any
) -> dict[str, Any]:
    identity: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": str(device),
        "torch_version": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        "cuda_version": torch.version.cuda,
        "cpu_affinity": _cpu_affinity(),
        "python_version": platform.python_version(),
        "nccl_libraries": mapped_libraries("libnccl"),
        "variables": fingerprint_variables(os.environ),
    }
    group_rank = os.environ.get("GROUP_RANK", "")
    if group_rank.isdigit():
        identity["group_rank"] = int(group_rank)
    if device.type == "cuda":
        identity.update(_gpu_identity(torch, device))
    return identity


def _cpu_affinity() -> str | None:
    """The CPUs this rank may run on (taskset, numactl, a scheduler's binding); Linux only."""
    from .cpulist import format_cpus

    getter = getattr(os, "sched_getaffinity", None)
    return format_cpus(getter(0)) if getter else None


def peer_access(torch: Any) -> list[dict[str, Any]]:
    """torch.cuda.can_device_access_peer for every ordered pair of the GPUs this rank sees."""
    cuda = torch.cuda
    bus_ids = [pci_bus_id(cuda.get_device_properties(i)) for i in range(cuda.device_count())]
    return [
        {
            "bus_id": bus_ids[a],
            "peer_bus_id": bus_ids[b],
            "can_access": cuda.can_device_access_peer(a, b),
        }
        for a in range(len(bus_ids))
        for b in range(len(bus_ids))
        if a != b and bus_ids[a] and bus_ids[b]
    ]


def fingerprint_variables(environ: Any) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(FINGERPRINT_PREFIXES)}


def mapped_libraries(stem: str, maps: str = "/proc/self/maps") -> list[str]:
    """Every file whose name starts with `stem` mapped into this process (Linux), in order."""
    try:
        with open(maps) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found: dict[str, None] = {}
    for line in lines:
        fields = line.split(None, 5)  # address perms offset dev inode path
        path = fields[5].strip() if len(fields) == 6 else ""
        if os.path.basename(path).startswith(stem):
            found[path] = None
    return list(found)


def pci_bus_id(props: Any) -> str | None:
    """A torch device's PCI bus id written as NVML writes it (00000000:18:00.0)."""
    if not hasattr(props, "pci_bus_id"):
        return None
    return f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


def _gpu_identity(torch: Any, device: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    props = torch.cuda.get_device_properties(device)
    facts["gpu_name"] = props.name
    bus_id = pci_bus_id(props)
    if bus_id:
        facts["pci_bus_id"] = bus_id
    with contextlib.suppress(Exception):
        facts["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        facts["driver_version"] = version.decode() if isinstance(version, bytes) else version
    except Exception:
        pass
    return facts


def gather_identities(
    torch: Any, me: dict[str, Any], rank: int, world_size: int, timeout_s: float
) -> list[dict[str, Any]]:
    """Every rank posts its identity; rank 0 returns all of them (the others an empty list)."""
    from torch.distributed import distributed_c10d

    store = distributed_c10d._get_default_store()
    store.set(KEY.format(rank), json.dumps(me))
    if rank != 0:
        return []
    keys = [KEY.format(r) for r in range(world_size)]
    store.wait(keys, timedelta(seconds=timeout_s))
    return [json.loads(store.get(key)) for key in keys]
