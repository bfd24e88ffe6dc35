"""Facts about how this machine's GPUs are wired, as NVML reports them (probes/topology.py).

Field names follow the NVML calls that fill them. Text values are NVML's enum names in
lower case (NVML_TOPOLOGY_HOSTBRIDGE -> "hostbridge", NVML_P2P_STATUS_GPU_NOT_SUPPORTED ->
"gpu-not-supported"), so a report reads like `nvidia-smi topo -m` and `-p2p` without a table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PcieLink:
    """A GPU's own PCIe link. `current_*` drops at idle to save power: judge it under load."""

    current_gen: int | None = None  # nvmlDeviceGetCurrPcieLinkGeneration
    current_width: int | None = None  # nvmlDeviceGetCurrPcieLinkWidth
    max_gen: int | None = None  # nvmlDeviceGetMaxPcieLinkGeneration: card and slot together
    max_width: int | None = None  # nvmlDeviceGetMaxPcieLinkWidth
    gpu_max_gen: int | None = None  # nvmlDeviceGetGpuMaxPcieLinkGeneration: the card alone


@dataclass(frozen=True)
class PcieSample:
    """The fastest link state seen while the job's bandwidth stage ran."""

    gen: int
    width: int
    samples: int


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool  # nvmlDeviceGetNvLinkState == NVML_FEATURE_ENABLED
    version: int | None = None  # nvmlDeviceGetNvLinkVersion: NVML_NVLINK_VERSION_* value
    remote_bus_id: str | None = None  # nvmlDeviceGetNvLinkRemotePciInfo(...).busId
    remote_type: str | None = None  # nvmlDeviceGetNvLinkRemoteDeviceType: gpu, switch, ...


@dataclass(frozen=True)
class Fabric:
    """nvmlDeviceGetGpuFabricInfo(V): the GPU's place in an NVSwitch fabric (Hopper and later)."""

    state: str  # not-supported, not-started, in-progress, completed
    status: int | None = None  # NVML return code of the registration; 0 is success


@dataclass(frozen=True)
class GpuTopology:
    index: int  # NVML's index (nvidia-smi's), not CUDA's
    pci_bus_id: str
    name: str = ""
    compute_capability: tuple[int, int] | None = None
    pcie: PcieLink = PcieLink()
    pcie_under_load: PcieSample | None = None  # None: not sampled while the job ran
    numa_node: int | None = None  # nvmlDeviceGetNumaNodeId, else the first node of its affinity
    cpu_affinity: str | None = None  # nvmlDeviceGetCpuAffinity as a CPU list, e.g. "0-55,112-167"
    nvlinks: tuple[NvLink, ...] = ()
    fabric: Fabric | None = None
    # Linux sysfs, where the IOMMU is on: the GPU's IOMMU group and its default domain type
    # (/sys/kernel/iommu_groups/N/type: "DMA", "DMA-FQ" translated, "identity" passthrough).
    iommu_group: int | None = None
    iommu_type: str | None = None

    @property
    def active_nvlinks(self) -> tuple[NvLink, ...]:
        return tuple(link for link in self.nvlinks if link.active)


@dataclass(frozen=True)
class GpuPair:
    """Two GPUs by NVML index: nvmlDeviceGetTopologyCommonAncestor and nvmlDeviceGetP2PStatus."""

    a: int
    b: int
    common_ancestor: str | None = None  # internal, single, multiple, hostbridge, node, system
    p2p_read: str | None = None  # ok, chipset-not-supported, gpu-not-supported, ...
    p2p_write: str | None = None
    p2p_nvlink: str | None = None


@dataclass(frozen=True)
class TopologyFacts:
    gpus: tuple[GpuTopology, ...] = ()
    pairs: tuple[GpuPair, ...] = ()
    under_load: str = "not sampled"  # how pcie_under_load was read, or why it was not

    def gpu_by_bus_id(self, bus_id: str | None) -> GpuTopology | None:
        wanted = normal_bus_id(bus_id)
        return next((g for g in self.gpus if normal_bus_id(g.pci_bus_id) == wanted), None)

    def pair(self, a: int, b: int) -> GpuPair | None:
        low, high = sorted((a, b))
        return next((p for p in self.pairs if (p.a, p.b) == (low, high)), None)


def normal_bus_id(bus_id: str | None) -> str | None:
    """'00000000:18:00.0' (NVML, torch) and '0000:18:00.0' (sysfs) -> '0000:18:00.0'."""
    if not bus_id:
        return None
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16)}"
    except ValueError:
        return bus_id.strip().lower()
