"""DDP029: a CUDA container image started without the host's GPUs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet, HostFacts
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule

GIB = 1024**3
GPU_NODE = re.compile(r"nvidia\d+|dxg")  # one per GPU; dxg: WSL2's GPU bridge
NVML_NOT_INSTALLED = "nvidia-ml-py is not installed"  # the doctor's own gap, not the container's
TOOLKIT = "the NVIDIA Container Toolkit"

RUNTIME_FIXES = {
    "docker": Remediation(
        "Start the container with its GPUs: docker run --gpus all ... . That needs "
        f"{TOOLKIT} on the host (after installing it: sudo nvidia-ctk runtime configure "
        "--runtime=docker, then restart Docker).",
        ("docker run --rm --gpus all ubuntu nvidia-smi -L",),
    ),
    "podman": Remediation(
        "Start the container with its GPUs: podman run --device nvidia.com/gpu=all ... . That "
        f"needs a CDI spec from {TOOLKIT} on the host (sudo nvidia-ctk cdi generate "
        "--output=/etc/cdi/nvidia.yaml).",
        ("nvidia-ctk cdi list",),
    ),
    "kubernetes": Remediation(
        "Ask for GPUs in the pod spec: resources.limits nvidia.com/gpu: <count>. The node "
        "needs the NVIDIA device plugin (or the GPU Operator) to offer them.",
        ("kubectl describe nodes | grep nvidia.com/gpu",),
    ),
}
GENERIC_FIX = Remediation(
    "Pass the GPUs into the container: docker run --gpus all, podman run --device "
    "nvidia.com/gpu=all (both through the NVIDIA Container Toolkit on the host), or on "
    "Kubernetes a resources.limits nvidia.com/gpu request served by the NVIDIA device plugin.",
)
SHM_ADVICE = {
    "kubernetes": " Also mount an emptyDir with medium: Memory at /dev/shm: it is {size} here.",
    "default": " Also add --ipc=host (or --shm-size=16g): /dev/shm is {size} here.",
}


@rule("DDP029", GENERIC_FIX)
def container_without_gpus(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a Docker, Podman or Kubernetes container (or another one the host probe
    recognises) with a CUDA build of torch that sees no GPU, where /dev has no NVIDIA GPU
    device node or NVML cannot start (the driver library is not mounted in).
    Why it matters: the image is built for GPUs but the container was started without them:
    torch.cuda.is_available() is False, so training falls back to the CPU or fails with "no
    CUDA GPUs are available", and "no NVIDIA driver" misleads into reinstalling drivers.
    Example: `docker run pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime torchrun ...` without
    --gpus; a Kubernetes pod without an nvidia.com/gpu limit.
    Fix: start it with the GPUs passed in, as its runtime does that (docker --gpus all, podman
    --device nvidia.com/gpu=all, a Kubernetes nvidia.com/gpu limit); with --ipc=host or a
    larger --shm-size when /dev/shm is small.
    """
    host, torch = facts.host, facts.torch
    if not host or not host.container or not torch or not torch.importable:
        return
    if not torch.cuda_version or torch.hip_version or (torch.cuda_available and torch.device_count):
        return
    missing_nodes = host.gpu_device_nodes is not None and not any(
        GPU_NODE.fullmatch(name) for name in host.gpu_device_nodes
    )
    nvml_error = _nvml_unavailable(facts)
    if not missing_nodes and nvml_error is None:
        return
    why = ["no NVIDIA GPU device node in /dev"] if missing_nodes else []
    why += [f"NVML: {nvml_error}"] if nvml_error else []
    small_shm = host.shm_total_bytes is not None and host.shm_total_bytes < GIB
    yield Hit(
        f"a {host.container} container with torch {torch.version} (CUDA {torch.cuda_version}) "
        f"but no GPU passed in: {'; '.join(why)}",
        {
            "container": host.container,
            "torch": torch.version,
            "device_nodes": list(host.gpu_device_nodes)
            if host.gpu_device_nodes is not None
            else None,
            "nvml": nvml_error,
            "nvidia_visible_devices": facts.env.get("NVIDIA_VISIBLE_DEVICES"),
            "shm_bytes": host.shm_total_bytes if small_shm else None,
        },
        fix=_fix_for(host, small_shm),
    )


def _nvml_unavailable(facts: FactSet) -> str | None:
    """Why NVML could not list GPUs here, unless it is the doctor's own missing package."""
    result = facts.results.get("nvml")
    if result is None or result.facts is not None or not result.error:
        return None
    return None if NVML_NOT_INSTALLED in result.error else result.error


def _fix_for(host: HostFacts, small_shm: bool) -> Remediation:
    base = RUNTIME_FIXES.get(host.container or "", GENERIC_FIX)
    if not small_shm or host.shm_total_bytes is None:
        return base
    size = f"{host.shm_total_bytes / 1024**2:.0f} MiB"
    advice = SHM_ADVICE.get(host.container or "", SHM_ADVICE["default"]).format(size=size)
    return Remediation(base.text + advice, base.commands)
