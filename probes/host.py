"""Host facts: OS, Python, CPU, memory, container, WSL, /dev/shm, Jupyter."""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from ddp_doctor.facts.machine import HostFacts


def collect_host(root: Path = Path("/")) -> HostFacts:
    """`root` lets tests point the /proc and /dev reads at a fake tree."""
    hostname = socket.gethostname()
    return HostFacts(
        system=platform.system(),
        release=platform.release(),
        python_version=platform.python_version(),
        hostname=hostname,
        hostname_address=_resolve(hostname),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(),
        memory_total_bytes=_memory_total(root),
        container=detect_container(root),
        wsl=detect_wsl(root),
        shm_total_bytes=shm_total_bytes(root),
        jupyter_kernel=in_jupyter_kernel(),
        interfaces=interface_names(),
        interfaces_up=interfaces_up(),
        gpu_device_nodes=gpu_device_nodes(root) if platform.system() == "Linux" else None,
    )


def interface_names() -> tuple[str, ...]:
    try:
        return tuple(sorted(name for _, name in socket.if_nameindex()))
    except (OSError, AttributeError):  # not on every platform
        return ()


def interfaces_up(names: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
    """The interfaces the system reports up (psutil, on every OS); None where it cannot say."""
    import psutil

    names = interface_names() if names is None else names
    try:
        stats = psutil.net_if_stats()
    except OSError:
        return None
    return tuple(name for name in names if name in stats and stats[name].isup)


def _resolve(hostname: str) -> str | None:
    try:
        return socket.gethostbyname(hostname)
    except OSError:
        return None


def _cpu_model() -> str | None:
    # py-cpuinfo's full scan costs about a second; its cheap /proc/cpuinfo path is enough here.
    for line in _read(Path("/proc/cpuinfo")).splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    try:
        import cpuinfo

        return cpuinfo.get_cpu_info().get("brand_raw") or None
    except Exception:
        return platform.processor() or None


def _memory_total(root: Path) -> int | None:
    for line in _read(root / "proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def detect_container(root: Path) -> str | None:
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run/.containerenv").exists():
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    cgroup = _read(root / "proc/1/cgroup")
    for marker in ("docker", "kubepods", "containerd", "lxc"):
        if marker in cgroup:
            return "kubernetes" if marker == "kubepods" else marker
    return None


def gpu_device_nodes(root: Path) -> tuple[str, ...] | None:
    """What the NVIDIA driver (or, under WSL2, the dxg bridge) put in /dev: a container
    started without its GPUs has none of them."""
    try:
        names = [entry.name for entry in (root / "dev").iterdir()]
    except OSError:
        return None
    return tuple(sorted(name for name in names if name.startswith("nvidia") or name == "dxg"))


def detect_wsl(root: Path) -> bool:
    return "microsoft" in _read(root / "proc/version").lower()


def shm_total_bytes(
    root: Path, statvfs: Callable[[str], os.statvfs_result] | None = None
) -> int | None:
    shm = root / "dev/shm"
    if not shm.is_dir():
        return None
    try:
        stats = (statvfs or os.statvfs)(str(shm))
    except (OSError, AttributeError):
        return None
    return stats.f_blocks * stats.f_frsize


def in_jupyter_kernel() -> bool:
    """True inside a notebook kernel (library use) or when launched from one (its env)."""
    return "ipykernel" in sys.modules or bool(os.environ.get("JPY_PARENT_PID"))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
