"""The job's GPUs as NCCL sees them: what each pair of GPUs can move per direction, and the
best ring through them (the ring whose slowest link is fastest), from NVML's topology facts.

Link rates are NCCL's own model of what a link delivers to a collective (NVIDIA/nccl
src/graph/topo.h and topo.cc), not the marketing line rate; nccl-tests' bus bandwidth
reflects the slowest link of the ring NCCL builds (nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from ddp_doctor.facts.topology import GpuPair, GpuTopology, TopologyFacts, normal_bus_id

# GB/s per NVLink and direction by compute capability: NCCL's ncclTopoNVLinkBw
# (SM60_NVLINK_BW 18.0, SM70/SM80 20.0, SM86 12.0, SM90 20.6, SM100 40.1). 18 x 20.6 = 370.8
# for an H100 is the ~370 GB/s NCCL reaches on NVLink 4 (NVIDIA/nccl-tests#212).
NVLINK_GBPS = ((100, 40.1), (90, 20.6), (80, 20.0), (70, 20.0), (60, 18.0))
NVLINK_GBPS_SM86 = 12.0
# NCCL's kvDictPciGen: 100 Mbit/s per lane for gen 1..6; a link is width x speed / 80 GB/s
# (gen4 x16: 24 GB/s, three quarters of the line rate).
PCIE_SPEED = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}
# Between two sockets, by CPU vendor (topo.h): SKL_QPI_BW 10.0 (NCCL gives later Xeons
# 22-40; 10 is the figure that holds for every Xeon since Skylake), AMD_BW 16.0, ARM_BW 6.0.
SOCKET_GBPS = {"intel": 10.0, "amd": 16.0, "arm": 6.0}
SOCKET_LINKS = {"intel": "Intel UPI", "amd": "AMD Infinity Fabric", "arm": "ARM"}
# Where NCCL uses P2P without NVLink (paths.cc, ncclTopoCheckP2p): on Intel and ARM CPUs only
# below one PCIe switch (PATH_PXB), on AMD across the whole machine; NVML must also say OK.
SWITCH_LEVELS = ("internal", "single", "multiple")
P2P_EVERYWHERE = ("amd",)
# NVML P2P statuses that the platform causes (ACS redirect, the IOMMU, a VM's emulated chipset,
# a driver registry key), unlike GPU_NOT_SUPPORTED, the card itself (GeForce). Below one PCIe
# switch they are fixable (DDP322), so the expectation is what P2P would give.
PLATFORM_BLOCKS = (
    "chipset-not-supported",
    "ioh-topology-not-supported",
    "disabled-by-regkey",
    "not-supported",
    "unknown",
)
MAX_SEARCHED_GPUS = 8  # every ring is searched up to here; beyond, the ranks' order is used


@dataclass(frozen=True)
class Edge:
    gbps: float
    path: str  # "nvswitch", "nvlink", "pcie-p2p" or "host-memory"
    detail: str  # the link that sets gbps, named for a person


@dataclass(frozen=True)
class Ring:
    order: tuple[int, ...]  # NVML indices in ring order
    bottleneck: Edge

    @property
    def path(self) -> str:
        return self.bottleneck.path


class Unmodelled(ValueError):
    """The facts do not say enough to model a link; the message says what is missing."""


def cpu_vendor(cpu_model: str | None) -> str | None:
    text = (cpu_model or "").lower()
    if "intel" in text or "xeon" in text:
        return "intel"
    if "amd" in text or "epyc" in text:
        return "amd"
    if "neoverse" in text or "grace" in text or "arm" in text:
        return "arm"
    return None


def nvlink_gbps(gpu: GpuTopology) -> float | None:
    if gpu.compute_capability is None:
        return None
    capability = gpu.compute_capability[0] * 10 + gpu.compute_capability[1]
    if capability == 86:
        return NVLINK_GBPS_SM86
    return next((rate for floor, rate in NVLINK_GBPS if capability >= floor), None)


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    if not gen or not width or gen not in PCIE_SPEED:
        return None
    return width * PCIE_SPEED[gen] / 80.0


def switch_links(gpu: GpuTopology) -> int:
    return sum(1 for link in gpu.active_nvlinks if link.remote_type == "switch")


def direct_links(gpu: GpuTopology, peer: GpuTopology) -> int:
    target = normal_bus_id(peer.pci_bus_id)
    return sum(1 for link in gpu.active_nvlinks if normal_bus_id(link.remote_bus_id) == target)


def edge(
    topology: TopologyFacts,
    a: GpuTopology,
    b: GpuTopology,
    vendor: str | None,
    peer_denied: bool = False,
) -> Edge:
    rate = min((r for r in (nvlink_gbps(a), nvlink_gbps(b)) if r), default=None)
    if rate and switch_links(a) and switch_links(b):
        slow = min((a, b), key=switch_links)
        links = switch_links(slow)
        who = "each GPU" if switch_links(a) == switch_links(b) else f"GPU {slow.index}"
        return Edge(
            links * rate, "nvswitch", f"{links} NVLinks to NVSwitch from {who} x {rate:g} GB/s"
        )
    if rate and direct_links(a, b):
        count = direct_links(a, b)
        detail = f"{count} NVLinks between GPU {a.index} and GPU {b.index} x {rate:g} GB/s"
        return Edge(count * rate, "nvlink", detail)
    return _pcie_edge(topology.pair(a.index, b.index), a, b, vendor, peer_denied)


def _pcie_edge(
    pair: GpuPair | None, a: GpuTopology, b: GpuTopology, vendor: str | None, peer_denied: bool
) -> Edge:
    links = [(gpu, pcie_gbps(gpu.pcie.max_gen, gpu.pcie.max_width)) for gpu in (a, b)]
    for gpu, gbps in links:
        if gbps is None:
            raise Unmodelled(f"NVML did not report GPU {gpu.index}'s PCIe link")
    if pair is None or pair.common_ancestor is None:
        raise Unmodelled(f"NVML did not report the PCIe path between GPU {a.index} and {b.index}")
    slow, gbps = min(links, key=lambda item: item[1] or 0.0)
    assert gbps is not None
    name = f"PCIe gen{slow.pcie.max_gen} x{slow.pcie.max_width}"
    if links[0][1] != links[1][1]:
        name = f"GPU {slow.index}'s {name}"
    level = pair.common_ancestor
    if level == "system":
        if vendor not in SOCKET_GBPS:
            raise Unmodelled(
                "the link between sockets is unknown (a CPU other than Intel, AMD, ARM)"
            )
        if SOCKET_GBPS[vendor] < gbps:
            gbps = SOCKET_GBPS[vendor]
            name = f"the link between sockets ({SOCKET_LINKS[vendor]}, {gbps:g} GB/s)"
    if _p2p_expected(pair, vendor, peer_denied):
        return Edge(gbps, "pcie-p2p", f"{name}, P2P")
    if level in SWITCH_LEVELS:
        # Without P2P the traffic goes up to the CPU and back down the switch's one uplink,
        # which carries it twice (NVIDIA/nccl#1086).
        return Edge(gbps / 2, "host-memory", f"{name}, no P2P: twice over the switch's uplink")
    return Edge(gbps, "host-memory", f"{name}, no P2P: through host memory")


def _p2p_expected(pair: GpuPair, vendor: str | None, peer_denied: bool) -> bool:
    """Whether NCCL would use P2P here once the platform lets it: below a switch a block is a
    fixable setting (DDP322); elsewhere NCCL's own limits and the statuses stand."""
    statuses = {pair.p2p_read, pair.p2p_write}
    if pair.common_ancestor in SWITCH_LEVELS:
        return statuses <= {"ok", *PLATFORM_BLOCKS}
    allowed = statuses == {"ok"} and not peer_denied
    return allowed and vendor in P2P_EVERYWHERE


def best_ring(edges: dict[tuple[int, int], Edge], gpus: list[int]) -> Ring:
    """The ring through `gpus` whose slowest edge is fastest: for each edge speed from the
    fastest down, look for a ring that uses only edges at least that fast. Up to 8 GPUs the
    search is exhaustive; beyond, the given order is used."""

    def edge_of(a: int, b: int) -> Edge:
        return edges[(a, b) if a < b else (b, a)]

    def slowest(order: tuple[int, ...]) -> Edge:
        hops = zip(order, order[1:] + order[:1], strict=True)
        return min((edge_of(a, b) for a, b in hops), key=lambda e: e.gbps)

    if len(gpus) > MAX_SEARCHED_GPUS:
        return Ring(tuple(gpus), slowest(tuple(gpus)))
    for speed in sorted({e.gbps for e in edges.values()}, reverse=True):
        order = _cycle(gpus, lambda a, b, speed=speed: edge_of(a, b).gbps >= speed)
        if order is not None:
            return Ring(order, slowest(order))
    return Ring(tuple(gpus), slowest(tuple(gpus)))  # two GPUs or fewer: the one edge


def _cycle(gpus: list[int], usable: Callable[[int, int], bool]) -> tuple[int, ...] | None:
    """A ring through every GPU over usable edges only (depth first), or None."""
    if len(gpus) < 3:
        return tuple(gpus) if len(gpus) < 2 or usable(gpus[0], gpus[1]) else None

    def extend(path: list[int]) -> tuple[int, ...] | None:
        if len(path) == len(gpus):
            return tuple(path) if usable(path[-1], path[0]) else None
        for gpu in gpus:
            if gpu not in path and usable(path[-1], gpu):
                found = extend([*path, gpu])
                if found:
                    return found
        return None

    return extend([gpus[0]])


def ring_through(
    topology: TopologyFacts,
    gpus: list[GpuTopology],
    vendor: str | None,
    denied: frozenset[tuple[int, int]] = frozenset(),
) -> Ring:
    """The best ring; `denied` holds pairs (by NVML index, low first) where CUDA refused peer
    access in the job although NVML allowed it."""
    if len(gpus) < 2:
        raise Unmodelled("one GPU moves no data between GPUs")
    ordered = sorted(gpus, key=lambda g: g.index)
    pairs = list(itertools.combinations(ordered, 2))
    if all(direct_links(a, b) for a, b in pairs):
        edges = _full_mesh(ordered, pairs)
    else:
        edges = {
            (a.index, b.index): edge(topology, a, b, vendor, (a.index, b.index) in denied)
            for a, b in pairs
        }
    return best_ring(edges, [g.index for g in gpus])


def _full_mesh(
    gpus: list[GpuTopology], pairs: list[tuple[GpuTopology, GpuTopology]]
) -> dict[tuple[int, int], Edge]:
    """GPUs joined pairwise by NVLink (a bridged pair, a 4-GPU HGX board): NCCL spreads its
    rings over every link, so each GPU moves what all its links to the others carry, as
    behind a switch."""

    def links_out(gpu: GpuTopology) -> int:
        return sum(direct_links(gpu, peer) for peer in gpus if peer is not gpu)

    edges = {}
    for a, b in pairs:
        rate = min((r for r in (nvlink_gbps(a), nvlink_gbps(b)) if r), default=None)
        if rate is None:
            raise Unmodelled("NVML did not report the compute capability that sets the NVLink rate")
        slow = min((a, b), key=links_out)
        who = "each GPU" if links_out(a) == links_out(b) else f"GPU {slow.index}"
        detail = f"{links_out(slow)} NVLinks from {who} to the others x {rate:g} GB/s"
        edges[(a.index, b.index)] = Edge(links_out(slow) * rate, "nvlink", detail)
    return edges
