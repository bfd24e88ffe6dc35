"""The environment probe keeps the variables that steer CUDA, NCCL, gloo and torchrun."""

from __future__ import annotations

import pytest

from ddp_doctor.probes.environment import collect_environment

MACHINE = {
    "NCCL_DEBUG": "INFO",
    "NCCL_SOCKET_IFNAME": "bond0",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "MASTER_ADDR": "10.12.0.17",
    "MASTER_PORT": "29500",
    "RANK": "0",
    "WORLD_SIZE": "16",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "8",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "GLOO_SOCKET_IFNAME": "bond0",
    "USE_LIBUV": "0",
    "OMP_NUM_THREADS": "8",
    # not ours
    "HF_TOKEN": "hf_sEcReT",
    "WANDB_API_KEY": "0123456789abcdef",
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/alice",
    "CUDA_HOME": "/usr/local/cuda",
    "CUDA_VISIBLE_DEVICES_BACKUP": "0",
    "MY_NCCL_DEBUG": "INFO",
    "NCCLX": "1",
    "TORCH_NCCL": "1",
    "nccl_debug": "INFO",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}
KEPT = {
    name
    for name in MACHINE
    if name.startswith(("NCCL_", "TORCH_NCCL_"))
    or name
    in {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "TORCH_DISTRIBUTED_DEBUG",
        "GLOO_SOCKET_IFNAME",
        "USE_LIBUV",
        "OMP_NUM_THREADS",
    }
}


def test_keeps_prefixed_and_exact_names_only() -> None:
    facts = collect_environment(MACHINE)
    assert set(facts.variables) == KEPT
    assert all(facts.variables[name] == MACHINE[name] for name in KEPT)
    assert "HF_TOKEN" not in facts.variables and "MY_NCCL_DEBUG" not in facts.variables


def test_variables_are_sorted() -> None:
    assert list(collect_environment(MACHINE).variables) == sorted(KEPT)


def test_empty_values_are_kept() -> None:
    """CUDA_VISIBLE_DEVICES="" hides every GPU: set-but-empty is a fact, not an absence."""
    assert collect_environment({"CUDA_VISIBLE_DEVICES": ""}).get("CUDA_VISIBLE_DEVICES") == ""


def test_reads_the_process_environment_by_default(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("NCCL_BLOCKING_WAIT", "1")
    clean_env.setenv("WORLD_SIZE", "abc")
    clean_env.setenv("SOME_API_TOKEN", "t0k3n")
    facts = collect_environment()
    assert facts.variables == {"NCCL_BLOCKING_WAIT": "1", "WORLD_SIZE": "abc"}
