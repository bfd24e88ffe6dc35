"""The host probe on a fake root tree: /proc, /.dockerenv, /dev/shm through a fake statvfs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddp_doctor.probes import host
from ddp_doctor.probes.host import (
    collect_host,
    detect_container,
    detect_wsl,
    in_jupyter_kernel,
    shm_total_bytes,
)

MIB = 1024**2


def write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def statvfs_of(total_bytes: int, frsize: int = 4096):  # type: ignore[no-untyped-def]
    blocks = total_bytes // frsize
    result = os.statvfs_result((frsize, frsize, blocks, blocks, blocks, 0, 0, 0, 0, 255))
    seen: list[str] = []

    def statvfs(path: str) -> os.statvfs_result:
        seen.append(path)
        return result

    statvfs.seen = seen  # type: ignore[attr-defined]
    return statvfs


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    return tmp_path


def test_memory_from_meminfo(root: Path) -> None:
    write(root, "proc/meminfo", "MemTotal:       32742136 kB\nMemFree:        1204 kB\n")
    assert host._memory_total(root) == 32742136 * 1024


def test_plain_host_is_not_a_container(root: Path) -> None:
    write(root, "proc/1/cgroup", "0::/init.scope\n")
    assert detect_container(root) is None


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        (".dockerenv", "", "docker"),
        ("run/.containerenv", 'engine="podman-4.9.3"\n', "podman"),
        ("proc/1/cgroup", "12:pids:/docker/3f9c2a7d1b04e5f6\n", "docker"),
        ("proc/1/cgroup", "0::/kubepods/burstable/pod1234/abcd\n", "kubernetes"),
        ("proc/1/cgroup", "0::/system.slice/containerd.service\n", "containerd"),
        ("proc/1/cgroup", "0::/lxc/ci-runner\n", "lxc"),
    ],
)
def test_container_markers(root: Path, path: str, text: str, expected: str) -> None:
    write(root, path, text)
    assert detect_container(root) == expected


def test_kubernetes_from_the_service_variable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert detect_container(root) == "kubernetes"


@pytest.mark.parametrize(
    ("version", "wsl"),
    [
        (
            "Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) "
            "11.2.0, GNU ld (GNU Binutils) 2.37) #1 SMP Fri Mar 29 23:14:13 UTC 2024\n",
            True,
        ),
        (
            "Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0)\n",
            True,
        ),
        (
            "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-007) (gcc (Ubuntu "
            "11.4.0-1ubuntu1~22.04) 11.4.0) #115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024\n",
            False,
        ),
    ],
)
def test_wsl_from_proc_version(root: Path, version: str, wsl: bool) -> None:
    write(root, "proc/version", version)
    assert detect_wsl(root) is wsl


def test_no_proc_version_is_not_wsl(root: Path) -> None:
    assert detect_wsl(root) is False


def test_shm_size_from_statvfs(root: Path) -> None:
    (root / "dev/shm").mkdir(parents=True)
    statvfs = statvfs_of(64 * MIB)
    assert shm_total_bytes(root, statvfs) == 64 * MIB
    assert statvfs.seen == [str(root / "dev/shm")]


def test_no_dev_shm(root: Path) -> None:
    assert shm_total_bytes(root, statvfs_of(64 * MIB)) is None


def test_statvfs_failing_is_unknown(root: Path) -> None:
    (root / "dev/shm").mkdir(parents=True)

    def failing(path: str) -> os.statvfs_result:
        raise PermissionError(13, "Permission denied", path)

    assert shm_total_bytes(root, failing) is None


def test_jupyter_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JPY_PARENT_PID", raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert in_jupyter_kernel() is False
    monkeypatch.setitem(sys.modules, "ipykernel", sys.modules[__name__])
    assert in_jupyter_kernel() is True
    monkeypatch.delitem(sys.modules, "ipykernel")
    monkeypatch.setenv("JPY_PARENT_PID", "4242")
    assert in_jupyter_kernel() is True


def test_collect_host_on_a_docker_tree(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(root, ".dockerenv")
    write(root, "proc/meminfo", "MemTotal:       2113425176 kB\n")
    write(root, "proc/version", "Linux version 5.15.0-105-generic (buildd@lcy02)\n")
    (root / "dev/shm").mkdir(parents=True)
    monkeypatch.setattr(host.os, "statvfs", statvfs_of(64 * MIB))
    facts = collect_host(root)
    assert facts.container == "docker"
    assert facts.memory_total_bytes == 2113425176 * 1024
    assert facts.shm_total_bytes == 64 * MIB
    assert facts.wsl is False
    assert facts.jupyter_kernel is False
    assert facts.system and facts.python_version and facts.hostname


def test_collect_host_on_an_empty_tree(root: Path) -> None:
    facts = collect_host(root)
    assert facts.container is None
    assert facts.shm_total_bytes is None
    assert facts.wsl is False


def test_gpu_device_nodes_are_listed(root: Path) -> None:
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null", "shm/x"):
        write(root, f"dev/{name}")
    assert host.gpu_device_nodes(root) == ("nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl")


def test_a_container_without_gpus_has_no_device_nodes(root: Path) -> None:
    write(root, "dev/null")
    assert host.gpu_device_nodes(root) == ()


def test_wsl2_gpu_bridge_counts_as_a_device_node(root: Path) -> None:
    write(root, "dev/dxg")
    assert host.gpu_device_nodes(root) == ("dxg",)


def test_unreadable_dev_is_unknown(root: Path) -> None:
    assert host.gpu_device_nodes(root / "missing") is None
