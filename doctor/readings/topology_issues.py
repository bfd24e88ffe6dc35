"""What is wrong in the wiring, read from the topology, job and environment facts. The rules
DDP320-DDP325 report these; DDP303 names them as the likely cause of a low bus bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.facts.job import Identity
from ddp_doctor.facts.machine import EnvFacts, FactSet
from ddp_doctor.facts.topology import GpuPair, GpuTopology, PcieSample
from ddp_doctor.patient.cpulist import parse_cpus
from ddp_doctor.readings.expected_busbw import denied_pairs, job_gpus
from ddp_doctor.readings.ring_model import (
    PLATFORM_BLOCKS,
    SWITCH_LEVELS,
    direct_links,
    switch_links,
)


@dataclass(frozen=True)
class DegradedLink:
    gpu: GpuTopology
    under_load: PcieSample


@dataclass(frozen=True)
class LinksDown:
    gpu: GpuTopology
    active: int
    usual: int  # the most active links a GPU of the same model has here
    down: tuple[int, ...]  # link numbers NVML reports inactive


@dataclass(frozen=True)
class BlockedP2p:
    pair: GpuPair
    why: str


@dataclass(frozen=True)
class FarRank:
    identity: Identity
    gpu: GpuTopology


@dataclass(frozen=True)
class TransportSwitch:
    variable: str
    value: str
    effect: str
    between_nodes_only: bool = False


def degraded_links(facts: FactSet) -> list[DegradedLink]:
    """The job's GPUs whose link ran below its maximum while the bandwidth stage ran (an idle
    link drops its generation on purpose, so only readings under load count)."""
    found = []
    for gpu in job_gpus(facts).gpus:
        sample, pcie = gpu.pcie_under_load, gpu.pcie
        if sample is None or pcie.max_gen is None or pcie.max_width is None:
            continue
        if sample.gen < pcie.max_gen or sample.width < pcie.max_width:
            found.append(DegradedLink(gpu, sample))
    return found


def nvlinks_down(facts: FactSet) -> list[LinksDown]:
    """GPUs with fewer active NVLinks than another GPU of the same model here. A count that is
    low on every GPU (an H800's 8 links, a single bridge) is the machine, not a fault."""
    topology = facts.topology
    if topology is None:
        return []
    usual: dict[str, int] = {}
    for gpu in topology.gpus:
        usual[gpu.name] = max(usual.get(gpu.name, 0), len(gpu.active_nvlinks))
    found = []
    for gpu in topology.gpus:
        down = tuple(link.link for link in gpu.nvlinks if not link.active)
        if len(gpu.active_nvlinks) < usual[gpu.name]:
            found.append(LinksDown(gpu, len(gpu.active_nvlinks), usual[gpu.name], down))
    return found


ACS_ISOLATES = (
    "ACS isolates them in separate IOMMU groups, so the switch sends their P2P to the CPU"
)


def blocked_p2p(facts: FactSet) -> list[BlockedP2p]:
    """Pairs under one PCIe switch (no NVLink between them) that cannot use P2P the direct way,
    though the GPUs could: ACS isolates them (Linux gave them separate IOMMU groups), NVML says
    the platform blocks P2P, or CUDA refused peer access in the job."""
    topology = facts.topology
    if topology is None:
        return []
    denied = denied_pairs(facts.job, topology) if facts.job else frozenset()
    by_index = {gpu.index: gpu for gpu in topology.gpus}
    found = []
    for pair in topology.pairs:
        if pair.common_ancestor not in SWITCH_LEVELS:
            continue
        a, b = by_index.get(pair.a), by_index.get(pair.b)
        if a is None or b is None or direct_links(a, b) or (switch_links(a) and switch_links(b)):
            continue
        statuses = {pair.p2p_read, pair.p2p_write}
        blocked = sorted(s for s in statuses if s in PLATFORM_BLOCKS)
        if blocked:
            found.append(BlockedP2p(pair, f"NVML P2P status {'/'.join(blocked)}"))
        elif None not in (a.iommu_group, b.iommu_group) and a.iommu_group != b.iommu_group:
            found.append(BlockedP2p(pair, ACS_ISOLATES))
        elif (pair.a, pair.b) in denied and statuses == {"ok"}:
            found.append(BlockedP2p(pair, "CUDA refused peer access although NVML reports OK"))
    return found


def far_ranks(facts: FactSet) -> list[FarRank]:
    """Ranks whose allowed CPUs are all outside their GPU's nearby CPUs."""
    job, topology = facts.job, facts.topology
    if job is None or topology is None:
        return []
    found = []
    for identity in job.identities:
        gpu = topology.gpu_by_bus_id(identity.pci_bus_id)
        allowed = parse_cpus(identity.cpu_affinity)
        near = parse_cpus(gpu.cpu_affinity) if gpu else None
        if gpu is None or not allowed or not near:
            continue
        if not allowed & near:
            found.append(FarRank(identity, gpu))
    return found


def fabric_not_ready(facts: FactSet) -> list[GpuTopology]:
    topology = facts.topology
    if topology is None:
        return []
    return [
        gpu
        for gpu in topology.gpus
        if gpu.fabric is not None
        and (gpu.fabric.state != "completed" or gpu.fabric.status not in (0, None))
    ]


def transport_switches(env: EnvFacts) -> list[TransportSwitch]:
    """The NCCL variables set here that turn a transport, algorithm or protocol off."""
    found = []
    for variable, off_when, effect, between_nodes in SWITCHES:
        value = env.get(variable)
        if value is not None and off_when(value.strip()):
            found.append(TransportSwitch(variable, value, effect, between_nodes))
    return found


def _nonzero(value: str) -> bool:
    # NCCL reads these with strtol: "1" switches off, "0" and words like "true" do not.
    try:
        return int(value) != 0
    except ValueError:
        return False


SWITCHES = (
    (
        "NCCL_P2P_DISABLE",
        _nonzero,
        "P2P over NVLink and PCIe is off: NCCL copies through host memory",
        False,
    ),
    (
        "NCCL_P2P_LEVEL",
        lambda value: value.upper() in ("LOC", "0"),
        "P2P is off for every pair of GPUs",
        False,
    ),
    (
        "NCCL_SHM_DISABLE",
        _nonzero,
        "the shared-memory transport is off: GPUs without P2P fall back to the network",
        False,
    ),
    (
        "NCCL_NVLS_ENABLE",
        lambda value: value == "0",
        "NVLink SHARP is off: all-reduce on H100/H200 NVSwitch drops from ~480 to ~370 GB/s",
        False,
    ),
    ("NCCL_ALGO", bool, "NCCL may use only the algorithms listed (or not those excluded)", False),
    (
        "NCCL_PROTO",
        bool,
        "NCCL may use only the protocols listed (LL128 is NVLink's fast one)",
        False,
    ),
    (
        "NCCL_IB_DISABLE",
        _nonzero,
        "InfiniBand/RoCE is off: traffic between nodes goes over TCP sockets",
        True,
    ),
    (
        "NCCL_NET",
        lambda value: value.lower() == "socket",
        "NCCL uses TCP sockets between nodes",
        True,
    ),
)
