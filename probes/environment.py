"""The environment variables that steer CUDA, NCCL, gloo and torchrun."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ddp_doctor.facts.machine import EnvFacts

EXACT_NAMES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TORCH_DISTRIBUTED_DEBUG",
    "TORCH_CPP_LOG_LEVEL",
    "GLOO_SOCKET_IFNAME",
    "GLOO_DEVICE_TRANSPORT",
    "USE_LIBUV",
    "OMP_NUM_THREADS",
    "NVIDIA_VISIBLE_DEVICES",  # which GPUs the NVIDIA container runtime passes in
)
PREFIXES = ("NCCL_", "TORCH_NCCL_")


def collect_environment(environ: Mapping[str, str] | None = None) -> EnvFacts:
    source = os.environ if environ is None else environ
    chosen = {
        name: value
        for name, value in source.items()
        if name in EXACT_NAMES or name.startswith(PREFIXES)
    }
    return EnvFacts(variables=dict(sorted(chosen.items())))
