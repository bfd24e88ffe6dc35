"""The topology part of the fake pynvml (tests/fakes.py's FakeNvml inherits it): PCIe links,
NUMA and CPU affinity, NVLinks, the NVSwitch fabric, and per pair of GPUs the common ancestor
and P2P status, under nvidia-ml-py's names, values and quirks."""

from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NOT_SUPPORTED, INVALID_ARGUMENT = 3, 2  # NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT

# nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a stray comma); the fake
# keeps that, so the probe must cope with it.
TOPOLOGY_CONSTANTS = {
    "NVML_FEATURE_DISABLED": 0,
    "NVML_FEATURE_ENABLED": 1,
    "NVML_NVLINK_MAX_LINKS": 36,
    "NVML_NVLINK_DEVICE_TYPE_GPU": 0x00,
    "NVML_NVLINK_DEVICE_TYPE_IBMNPU": 0x01,
    "NVML_NVLINK_DEVICE_TYPE_SWITCH": 0x02,
    "NVML_NVLINK_DEVICE_TYPE_UNKNOWN": 0xFF,
    "NVML_NVLINK_VERSION_3_0": 4,
    "NVML_NVLINK_VERSION_4_0": 6,
    "NVML_TOPOLOGY_INTERNAL": 0,
    "NVML_TOPOLOGY_SINGLE": 10,
    "NVML_TOPOLOGY_MULTIPLE": 20,
    "NVML_TOPOLOGY_HOSTBRIDGE": 30,
    "NVML_TOPOLOGY_NODE": 40,
    "NVML_TOPOLOGY_SYSTEM": 50,
    "NVML_P2P_CAPS_INDEX_READ": (0,),
    "NVML_P2P_CAPS_INDEX_WRITE": 1,
    "NVML_P2P_CAPS_INDEX_NVLINK": 2,
    "NVML_P2P_STATUS_OK": 0,
    "NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED": 1,
    "NVML_P2P_STATUS_GPU_NOT_SUPPORTED": 2,
    "NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED": 3,
    "NVML_P2P_STATUS_DISABLED_BY_REGKEY": 4,
    "NVML_P2P_STATUS_NOT_SUPPORTED": 5,
    "NVML_P2P_STATUS_UNKNOWN": 6,
    "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_STATE_NOT_STARTED": 1,
    "NVML_GPU_FABRIC_STATE_IN_PROGRESS": 2,
    "NVML_GPU_FABRIC_STATE_COMPLETED": 3,
    "NVML_AFFINITY_SCOPE_NODE": 0,
    "NVML_AFFINITY_SCOPE_SOCKET": 1,
}
TOPOLOGY_LEVELS = {
    "internal": 0,
    "single": 10,
    "multiple": 20,
    "hostbridge": 30,
    "node": 40,
    "system": 50,
}
P2P_CODES = {
    "ok": 0,
    "chipset-not-supported": 1,
    "gpu-not-supported": 2,
    "ioh-topology-not-supported": 3,
    "disabled-by-regkey": 4,
    "not-supported": 5,
    "unknown": 6,
}
FABRIC_STATES = {"not-supported": 0, "not-started": 1, "in-progress": 2, "completed": 3}


@dataclass(frozen=True)
class FakeNvLink:
    active: bool = True
    remote_bus_id: str = "00000000:05:00.0"
    remote_type: int = 0x02  # NVML_NVLINK_DEVICE_TYPE_SWITCH
    version: int = 6  # NVML_NVLINK_VERSION_4_0


@dataclass(frozen=True)
class FakePair:
    """What NVML answers for two GPUs: the common ancestor and the P2P statuses."""

    ancestor: str = "node"
    read: str = "ok"
    write: str = "ok"
    nvlink: str = "not-supported"


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class c_nvmlGpuFabricInfoV_t(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint32),
    ]


class TopologyQueries:
    """NVML's topology queries over FakeNvml's GPUs (`self.gpus`, `self.pairs`, ...)."""

    under_load: bool
    pairs: dict[tuple[int, int], FakePair]
    default_pair: FakePair

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._supported(self._current_link(handle))[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._supported(self._current_link(handle))[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._supported(self._gpu(handle).pcie_max)[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._supported(self._gpu(handle).pcie_max)[1]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._supported(self._gpu(handle).gpu_max_gen)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        return self._supported(self._gpu(handle).numa_node)

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, words: int, scope: int) -> list[int]:
        assert scope == TOPOLOGY_CONSTANTS["NVML_AFFINITY_SCOPE_NODE"]
        return _mask_words(self._supported(self._gpu(handle).memory_nodes), words)

    def nvmlDeviceGetCpuAffinity(self, handle: Any, words: int) -> list[int]:
        return _mask_words(self._supported(self._gpu(handle).cpus), words)

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        return int(self._nvlink(handle, link).active)

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int:
        return self._nvlink(handle, link).version

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> types.SimpleNamespace:
        nvlink = self._nvlink(handle, link)
        if not nvlink.active:
            self._refuse(NOT_SUPPORTED)
        return types.SimpleNamespace(busId=nvlink.remote_bus_id)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return self._nvlink(handle, link).remote_type

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info: Any) -> int:
        return self._fill_fabric(handle, info)

    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info: Any) -> int:
        return self._fill_fabric(handle, info)

    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any) -> int:
        return TOPOLOGY_LEVELS[self._pair(first, second).ancestor]

    def nvmlDeviceGetP2PStatus(self, first: Any, second: Any, index: int) -> int:
        if not isinstance(index, int):  # what ctypes does with the tuple NVML_P2P_CAPS_INDEX_READ
            raise ctypes.ArgumentError(
                "argument 3: TypeError: Don't know how to convert parameter 3"
            )
        pair = self._pair(first, second)
        return P2P_CODES[(pair.read, pair.write, pair.nvlink)[index]]

    def _current_link(self, handle: Any) -> tuple[int, int] | None:
        gpu = self._gpu(handle)
        return gpu.pcie_loaded if self.under_load else gpu.pcie_idle

    def _nvlink(self, handle: Any, link: int) -> FakeNvLink:
        links = self._gpu(handle).nvlinks
        if not links:
            self._refuse(NOT_SUPPORTED)
        if link >= len(links):
            self._refuse(INVALID_ARGUMENT)
        return links[link]

    def _fill_fabric(self, handle: Any, ref: Any) -> int:
        state, status = self._supported(self._gpu(handle).fabric)
        ref._obj.state = FABRIC_STATES[state]  # ctypes.byref(info)._obj is info itself
        ref._obj.status = status
        return 0  # NVML_SUCCESS

    def _pair(self, first: Any, second: Any) -> FakePair:
        key = (min(first.index, second.index), max(first.index, second.index))
        return self.pairs.get(key, self.default_pair)

    def _gpu(self, handle: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def _supported(value: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def _refuse(code: int) -> Any:
        raise NotImplementedError


def _mask_words(members: tuple[int, ...], words: int) -> list[int]:
    """CPUs or NUMA nodes as NVML returns them: 64-bit words, bit i of word j is j*64+i."""
    mask = [0] * words
    for member in members:
        if member // 64 < words:
            mask[member // 64] |= 1 << (member % 64)
    return mask


def fake_sysfs(root: Path, groups: dict[str, tuple[int, str]]) -> Path:
    """A /sys with the IOMMU group of each PCI device: {"0000:4f:00.0": (41, "DMA-FQ")}."""
    for bus_id, (group, kind) in groups.items():
        group_dir = root / "kernel" / "iommu_groups" / str(group)
        group_dir.mkdir(parents=True, exist_ok=True)
        (group_dir / "type").write_text(kind + "\n")
        device = root / "bus" / "pci" / "devices" / bus_id
        device.mkdir(parents=True, exist_ok=True)
        (device / "iommu_group").symlink_to(group_dir)
    return root
