"""How the GPUs are wired, from NVML: PCIe links, NUMA and CPU affinity, NVLinks, the NVSwitch
fabric, and per pair of GPUs the common PCIe ancestor and P2P status (as `nvidia-smi topo -m`
and `nvidia-smi topo -p2p` show them).

The pynvml module is passed in so that tests can hand a fake at this boundary. Queries a GPU
does not support answer NVMLError: that is "unknown" for the one value, not a failed probe.
Each GPU's IOMMU group comes from sysfs (read only; absent where the IOMMU is off): Linux puts
two GPUs under one PCIe switch in separate groups only when ACS isolates them, that is when
the switch sends their P2P traffic up to the CPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
from collections.abc import Callable, Iterator
from itertools import combinations
from pathlib import Path
from types import ModuleType
from typing import Any

from ddp_doctor.facts.topology import (
    Fabric,
    GpuPair,
    GpuTopology,
    NvLink,
    PcieLink,
    TopologyFacts,
    normal_bus_id,
)
from ddp_doctor.patient.cpulist import cpus_from_mask_words, format_cpus
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped
from ddp_doctor.probes.nvml import import_pynvml, start_nvml

# NVML enum values -> the lower-case enum names the facts carry.
TOPOLOGY_LEVELS = ("INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM")
P2P_STATUSES = (
    "OK",
    "CHIPSET_NOT_SUPPORTED",
    "GPU_NOT_SUPPORTED",
    "IOH_TOPOLOGY_NOT_SUPPORTED",
    "DISABLED_BY_REGKEY",
    "NOT_SUPPORTED",
    "UNKNOWN",
)
NVLINK_DEVICE_TYPES = ("GPU", "IBMNPU", "SWITCH", "UNKNOWN")
FABRIC_STATES = ("NOT_SUPPORTED", "NOT_STARTED", "IN_PROGRESS", "COMPLETED")
P2P_CAPS = ("READ", "WRITE", "NVLINK")
NUMA_NODE_WORDS = 4  # nvmlDeviceGetMemoryAffinity's node mask: 4 x 64 bits, 256 NUMA nodes
# nvmlDeviceGetCpuAffinity's mask: at least 16 x 64 bits, since CPU numbers can run past the
# count of online CPUs (offline or isolated cores).
CPU_MASK_WORDS = 16


@contextlib.contextmanager
def nvml_session(nvml: ModuleType) -> Iterator[None]:
    """nvmlInit ... nvmlShutdown; no driver is 'skipped', any other NVML error 'failed'."""
    start_nvml(nvml)
    try:
        yield
    except nvml.NVMLError as error:
        raise ProbeFailed(f"NVML topology query failed: {error}") from None
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def collect_topology(nvml: ModuleType | None = None, sysfs: Path = Path("/sys")) -> TopologyFacts:
    nvml = nvml or import_pynvml()
    with nvml_session(nvml):
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            raise ProbeSkipped("the NVIDIA driver is loaded but sees no GPU")
        handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
        gpus = tuple(_gpu(nvml, index, handle, sysfs) for index, handle in enumerate(handles))
        pairs = tuple(_pair(nvml, handles, a, b) for a, b in combinations(range(count), 2))
    return TopologyFacts(gpus=gpus, pairs=pairs)


def _gpu(nvml: ModuleType, index: int, handle: Any, sysfs: Path) -> GpuTopology:
    capability = _query(nvml, lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    affinity = _cpu_affinity(nvml, handle)
    bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
    group, group_type = iommu_group(sysfs, bus_id)
    return GpuTopology(
        index=index,
        pci_bus_id=bus_id,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        compute_capability=tuple(capability) if capability else None,
        pcie=_pcie(nvml, handle),
        numa_node=_numa_node(nvml, handle),
        cpu_affinity=format_cpus(affinity) if affinity else None,
        nvlinks=_nvlinks(nvml, handle),
        fabric=_fabric(nvml, handle),
        iommu_group=group,
        iommu_type=group_type,
    )


def iommu_group(sysfs: Path, bus_id: str) -> tuple[int | None, str | None]:
    """The device's IOMMU group number and the group's domain type; (None, None) without one."""
    device = sysfs / "bus" / "pci" / "devices" / str(normal_bus_id(bus_id))
    try:
        group = int(Path(os.readlink(device / "iommu_group")).name)
    except (OSError, ValueError):
        return None, None
    try:
        kind = (sysfs / "kernel" / "iommu_groups" / str(group) / "type").read_text().strip()
    except OSError:
        kind = None
    return group, kind or None


def _pcie(nvml: ModuleType, handle: Any) -> PcieLink:
    def ask(name: str) -> int | None:
        return _query(nvml, lambda: int(getattr(nvml, name)(handle)))

    return PcieLink(
        current_gen=ask("nvmlDeviceGetCurrPcieLinkGeneration"),
        current_width=ask("nvmlDeviceGetCurrPcieLinkWidth"),
        max_gen=ask("nvmlDeviceGetMaxPcieLinkGeneration"),
        max_width=ask("nvmlDeviceGetMaxPcieLinkWidth"),
        gpu_max_gen=ask("nvmlDeviceGetGpuMaxPcieLinkGeneration"),
    )


def _numa_node(nvml: ModuleType, handle: Any) -> int | None:
    """nvmlDeviceGetNumaNodeId answers only where the GPU is itself a NUMA node on some
    platforms; the node mask of nvmlDeviceGetMemoryAffinity works on x86 servers."""
    node = _query(nvml, lambda: nvml.nvmlDeviceGetNumaNodeId(handle))
    if isinstance(node, int) and node >= 0:
        return node
    mask = _query(
        nvml,
        lambda: nvml.nvmlDeviceGetMemoryAffinity(
            handle, NUMA_NODE_WORDS, nvml.NVML_AFFINITY_SCOPE_NODE
        ),
    )
    nodes = sorted(cpus_from_mask_words(mask)) if mask is not None else []
    return nodes[0] if nodes else None


def _cpu_affinity(nvml: ModuleType, handle: Any) -> frozenset[int] | None:
    words = max(CPU_MASK_WORDS, math.ceil((os.cpu_count() or 64) / 64))
    mask = _query(nvml, lambda: nvml.nvmlDeviceGetCpuAffinity(handle, words))
    return cpus_from_mask_words(mask) if mask is not None else None


def _nvlinks(nvml: ModuleType, handle: Any) -> tuple[NvLink, ...]:
    links = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            break  # Not Supported: no NVLink at all; Invalid Argument: past the GPU's last link
        if state != nvml.NVML_FEATURE_ENABLED:
            links.append(NvLink(link, active=False))
            continue
        remote = _query(nvml, lambda link=link: nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        remote_type = _query(
            nvml, lambda link=link: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        )
        links.append(
            NvLink(
                link,
                active=True,
                version=_query(
                    nvml, lambda link=link: nvml.nvmlDeviceGetNvLinkVersion(handle, link)
                ),
                remote_bus_id=_text(remote.busId) if remote is not None else None,
                remote_type=_enum_name(
                    nvml, "NVML_NVLINK_DEVICE_TYPE_", NVLINK_DEVICE_TYPES, remote_type
                ),
            )
        )
    return tuple(links)


def _fabric(nvml: ModuleType, handle: Any) -> Fabric | None:
    """The versioned query first (drivers 550+), then the original one."""
    for struct_name, query_name in (
        ("c_nvmlGpuFabricInfoV_t", "nvmlDeviceGetGpuFabricInfoV"),
        ("c_nvmlGpuFabricInfo_t", "nvmlDeviceGetGpuFabricInfo"),
    ):
        struct_type, query = getattr(nvml, struct_name, None), getattr(nvml, query_name, None)
        if struct_type is None or query is None:
            continue  # an nvidia-ml-py older than the query
        info = struct_type()
        try:
            query(handle, ctypes.byref(info))
        except nvml.NVMLError:
            continue
        state = _enum_name(nvml, "NVML_GPU_FABRIC_STATE_", FABRIC_STATES, info.state)
        return None if state == "not-supported" else Fabric(str(state), int(info.status))
    return None


def _pair(nvml: ModuleType, handles: list[Any], a: int, b: int) -> GpuPair:
    first, second = handles[a], handles[b]
    level = _query(nvml, lambda: nvml.nvmlDeviceGetTopologyCommonAncestor(first, second))

    def p2p(capability: str) -> str | None:
        index = _p2p_index(getattr(nvml, f"NVML_P2P_CAPS_INDEX_{capability}"))
        status = _query(nvml, lambda: nvml.nvmlDeviceGetP2PStatus(first, second, index))
        return _enum_name(nvml, "NVML_P2P_STATUS_", P2P_STATUSES, status)

    return GpuPair(
        a,
        b,
        common_ancestor=_enum_name(nvml, "NVML_TOPOLOGY_", TOPOLOGY_LEVELS, level),
        p2p_read=p2p("READ"),
        p2p_write=p2p("WRITE"),
        p2p_nvlink=p2p("NVLINK"),
    )


def _p2p_index(value: Any) -> int:
    # nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ = 0, (a stray comma makes it the tuple
    # (0,)), which ctypes refuses to pass: unwrap it.
    return int(value[0]) if isinstance(value, tuple) else int(value)


def _enum_name(nvml: ModuleType, prefix: str, names: tuple[str, ...], value: Any) -> str | None:
    """An NVML enum value -> its name in lower kebab case, looked up in the module's own
    constants; a value the module does not name is kept as its number."""
    if value is None:
        return None
    for name in names:
        if getattr(nvml, prefix + name, None) == value:
            return name.lower().replace("_", "-")
    return str(value)


def _query(nvml: ModuleType, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except nvml.NVMLError:
        return None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
