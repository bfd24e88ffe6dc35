"""Topologies built straight from the facts dataclasses, for the expected-busbw and topology
issue tests: HGX boards behind NVSwitch, PCIe GPUs, NVLink meshes, and the job on them."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from ddp_doctor.facts.job import BandwidthRow, Identity, JobFacts, PeerAccess, Preflight
from ddp_doctor.facts.machine import EnvFacts, FactSet, HostFacts
from ddp_doctor.facts.topology import GpuPair, GpuTopology, NvLink, PcieLink, TopologyFacts
from ddp_doctor.model import ProbeResult, ProbeStatus

GIB, MIB = 1024**3, 1024**2
INTEL, AMD = "Intel(R) Xeon(R) Platinum 8480C", "AMD EPYC 7763 64-Core Processor"


def bus(index: int) -> str:
    return f"00000000:{0x10 + index:02X}:00.0"


def switch_gpu(index: int, links: int = 18, capability: tuple[int, int] = (9, 0)) -> GpuTopology:
    nvlinks = tuple(NvLink(i, True, 6, "00000000:05:00.0", "switch") for i in range(links))
    return GpuTopology(
        index, bus(index), "GPU", capability, PcieLink(1, 16, 5, 16, 5), nvlinks=nvlinks
    )


def pcie_gpu(
    index: int, gen: int = 4, width: int = 16, capability: tuple[int, int] = (8, 0)
) -> GpuTopology:
    return GpuTopology(index, bus(index), "GPU", capability, PcieLink(1, width, gen, width, gen))


def meshed(gpus: list[GpuTopology], links_per_pair: int) -> list[GpuTopology]:
    """Every pair joined by `links_per_pair` NVLinks (no switch)."""
    joined = []
    for gpu in gpus:
        links = [
            NvLink(slot * links_per_pair + k, True, 4, peer.pci_bus_id, "gpu")
            for slot, peer in enumerate(p for p in gpus if p is not gpu)
            for k in range(links_per_pair)
        ]
        joined.append(dataclasses.replace(gpu, nvlinks=tuple(links)))
    return joined


def pairs(
    gpus: Sequence[GpuTopology], ancestor: object = "node", status: str = "ok"
) -> tuple[GpuPair, ...]:
    """`ancestor`: one level for every pair, or a function of the two indices."""
    result = []
    for a, b in itertools.combinations(gpus, 2):
        level = ancestor(a.index, b.index) if callable(ancestor) else ancestor
        result.append(GpuPair(a.index, b.index, str(level), status, status))
    return tuple(result)


def facts_for(
    gpus: list[GpuTopology],
    gpu_pairs: tuple[GpuPair, ...] = (),
    cpu: str | None = INTEL,
    ops: Sequence[str] = ("all_reduce",),
    busbw: float = 1.0,
    nccl: str = "2.21.5",
    backend: str = "nccl",
    hosts: int = 1,
    peer_access: tuple[PeerAccess, ...] = (),
    topology: bool = True,
) -> FactSet:
    identities = tuple(
        Identity(
            r,
            len(gpus),
            r,
            f"node{r % hosts}",
            100 + r,
            f"cuda:{r}",
            g.pci_bus_id,
            nccl_version=nccl,
        )
        for r, g in enumerate(gpus)
    )
    rows = tuple(
        BandwidthRow(size, size // 4, "float", 1.0, busbw, busbw, op)
        for op in ops
        for size in (MIB, 256 * MIB)
    )
    job = JobFacts(
        launched=True,
        preflight=Preflight("127.0.0.1"),
        backend=backend,
        nproc=len(gpus),
        identities=identities,
        bandwidth=rows,
        peer_access=peer_access,
    )
    results = [
        ProbeResult(
            "host", ProbeStatus.OK, HostFacts("Linux", "6.8", "3.11", "node0", cpu_model=cpu), 0.0
        ),
        ProbeResult("env", ProbeStatus.OK, EnvFacts({}), 0.0),
        ProbeResult("job", ProbeStatus.OK, job, 1.0),
    ]
    if topology:
        facts = TopologyFacts(tuple(gpus), gpu_pairs)
        results.append(ProbeResult("topology", ProbeStatus.OK, facts, 0.1))
    else:
        results.append(
            ProbeResult("topology", ProbeStatus.SKIPPED, None, 0.0, "no NVML: no driver")
        )
    return FactSet.of(results)


def hgx(count: int = 8, links: int = 18, capability: tuple[int, int] = (9, 0)) -> list[GpuTopology]:
    return [switch_gpu(i, links, capability) for i in range(count)]
