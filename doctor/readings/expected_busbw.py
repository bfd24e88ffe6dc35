"""The bus bandwidth the job's GPUs should reach, per collective, and the band DDP303 judges
against: the ring's slowest link at NCCL's own link rates (ring_model.py), NVLink SHARP
(NVLS) for all-reduce where published figures cover it, and "no expectation" wherever the
facts do not say enough (never a guess).

The published nccl-tests results below are the anchors: tests/test_expected_busbw.py checks
that each lies inside the band DDP303 allows and at most 5% above the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.topology import GpuTopology, TopologyFacts
from ddp_doctor.readings.ring_model import Ring, Unmodelled, cpu_vendor, ring_through


@dataclass(frozen=True)
class Published:
    setup: str
    op: str
    busbw_gbps: float  # at large sizes (1 GiB and up)
    source: str


# busbw at large sizes on healthy machines. A healthy figure must not trip DDP303 (it is at
# least FLOOR_AT_PEAK of the model) and the model must not undersell the hardware (the figure
# is at most 5% above it): tests/test_expected_busbw.py checks both for every row.
PUBLISHED = (
    Published(
        "8x H100 SXM, NVLink 4 via NVSwitch, NVLS", "all_reduce", 480.0, "NVIDIA/nccl-tests#212"
    ),
    Published(
        "8x H100 SXM, NVLink 4 via NVSwitch, ring", "all_gather", 370.0, "NVIDIA/nccl-tests#212"
    ),
    Published("8x H200, NVLink 4 via NVSwitch, NVLS", "all_reduce", 475.0, "NVIDIA/nccl-tests#272"),
    Published("8x H800, 8 NVLinks via NVSwitch, NVLS", "all_reduce", 215.0, "NVIDIA/nccl#1374"),
    Published("8x A100 SXM, NVLink 3 via NVSwitch", "all_reduce", 200.0, "NVIDIA/nccl-tests#149"),
)
NVLS_PER_RING = 480.0 / 370.8  # NVLS all-reduce over the ring figure, 8x H100 (nccl-tests#212)
NVLS_GPUS = 8  # the only GPU count the published NVLS figures cover
NVLS_MIN_CAPABILITY = (9, 0)  # NVLink SHARP needs NVLink 4 NVSwitches (Hopper)
NVLS_MIN_NCCL = (2, 17)

# Below this size a collective is latency-bound: no % of expected and no verdict.
BANDWIDTH_BOUND_BYTES = 64 * 1024**2
# Published peaks are reached from about 1 GiB ("256M is too small to reach peak bandwidth",
# NVIDIA/nccl-tests#212); below it the floor leaves room for the climb.
PEAK_BYTES = 1024**3
# DDP303 fires under floor x expected. Host-memory copies depend on the CPU and its memory far
# more than links do (NVIDIA/nccl#1639, #384), so their band is twice as wide.
FLOOR = {"nvswitch": 0.5, "nvlink": 0.5, "pcie-p2p": 0.5, "host-memory": 0.25}
FLOOR_AT_PEAK = {"nvswitch": 0.7, "nvlink": 0.7, "pcie-p2p": 0.7, "host-memory": 0.35}
BUS_FACTORS = {
    "all_reduce": "2(n-1)/n",
    "all_gather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "broadcast": "1",
    "all_to_all": "(n-1)/n",
}


@dataclass(frozen=True)
class Expectation:
    op: str
    gbps: float | None  # None: no expectation, `basis` says why
    basis: str
    path: str | None = None  # the bottleneck's kind: nvswitch, nvlink, pcie-p2p, host-memory
    bottleneck: str | None = None
    source: str | None = None

    def floor_gbps(self, size_bytes: int) -> float | None:
        if self.gbps is None or self.path is None or size_bytes < BANDWIDTH_BOUND_BYTES:
            return None
        fractions = FLOOR_AT_PEAK if size_bytes >= PEAK_BYTES else FLOOR
        return round(self.gbps * fractions[self.path], 2)

    def percent(self, size_bytes: int, busbw_gbps: float) -> float | None:
        if self.gbps is None or size_bytes < BANDWIDTH_BOUND_BYTES:
            return None
        return round(100 * busbw_gbps / self.gbps, 1)


@dataclass(frozen=True)
class JobGpus:
    """The job's GPUs in NVML's topology, or why they cannot be placed there."""

    gpus: tuple[GpuTopology, ...] = ()
    why_not: str | None = None


def job_gpus(facts: FactSet) -> JobGpus:
    job, topology = facts.job, facts.topology
    if job is None or not job.identities:
        return JobGpus(why_not="the job did not say which device each rank used")
    if job.backend != "nccl":
        return JobGpus(
            why_not=f"{job.backend} on CPU moves data through host memory and sockets, and no "
            "published figure covers that"
        )
    hosts = {identity.host for identity in job.identities}
    if len(hosts) > 1:
        return JobGpus(why_not=f"the ranks span {len(hosts)} hosts; the network is not modelled")
    if topology is None:
        result = facts.results.get("topology")
        why = result.error if result is not None and result.error else "no topology facts"
        return JobGpus(why_not=f"the GPU topology is unknown ({why})")
    gpus = []
    for identity in sorted(job.identities, key=lambda i: i.rank):
        gpu = topology.gpu_by_bus_id(identity.pci_bus_id)
        if gpu is None:
            return JobGpus(why_not=f"rank {identity.rank}'s GPU is not in NVML's list")
        if gpu not in gpus:
            gpus.append(gpu)
    if len(gpus) < 2:
        return JobGpus(why_not="one GPU moves no data between GPUs")
    return JobGpus(gpus=tuple(gpus))


def denied_pairs(job: JobFacts, topology: TopologyFacts) -> frozenset[tuple[int, int]]:
    """Pairs where torch.cuda.can_device_access_peer said no inside the job."""
    denied = set()
    for access in job.peer_access:
        a, b = topology.gpu_by_bus_id(access.bus_id), topology.gpu_by_bus_id(access.peer_bus_id)
        if a is not None and b is not None and not access.can_access:
            denied.add((min(a.index, b.index), max(a.index, b.index)))
    return frozenset(denied)


def job_ring(facts: FactSet) -> Ring | str:
    """The best ring through the job's GPUs, or why there is none to model."""
    placed = job_gpus(facts)
    if placed.why_not:
        return placed.why_not
    topology, job = facts.topology, facts.job
    assert topology is not None and job is not None
    vendor = cpu_vendor(facts.host.cpu_model if facts.host else None)
    try:
        return ring_through(topology, list(placed.gpus), vendor, denied_pairs(job, topology))
    except Unmodelled as error:
        return str(error)


def expectations(facts: FactSet) -> dict[str, Expectation]:
    """One expectation per collective the job swept."""
    job = facts.job
    if job is None:
        return {}
    ops = list(dict.fromkeys([row.op for row in job.bandwidth] + list(job.bandwidth_errors)))
    if not ops:
        return {}
    ring = job_ring(facts)
    return {op: expect(op, ring, facts) for op in ops}


def expect(op: str, ring: Ring | str, facts: FactSet) -> Expectation:
    if isinstance(ring, str):
        return Expectation(op, None, f"no expectation: {ring}")
    link = ring.bottleneck
    if op == "all_to_all" and link.path != "nvswitch":
        return Expectation(
            op,
            None,
            "no expectation: all_to_all over PCIe crosses switch uplinks NVML does not show",
        )
    if op == "all_reduce" and _nvls_applies(ring, facts):
        gbps = round(link.gbps * NVLS_PER_RING, 1)
        return Expectation(
            op,
            gbps,
            f"NVLink SHARP (NVLS) on {NVLS_GPUS} GPUs behind NVSwitch: {NVLS_PER_RING:.2f} x the "
            f"ring's {link.gbps:.1f} GB/s ({link.detail})",
            link.path,
            link.detail,
            "NVIDIA/nccl-tests#212",
        )
    return Expectation(
        op,
        round(link.gbps, 1),
        f"ring through {len(ring.order)} GPUs, slowest link {link.detail}",
        link.path,
        link.detail,
        "NCCL's link model, NVIDIA/nccl src/graph/topo.h",
    )


def _nvls_applies(ring: Ring, facts: FactSet) -> bool:
    topology, job = facts.topology, facts.job
    if ring.path != "nvswitch" or len(ring.order) != NVLS_GPUS or topology is None or job is None:
        return False
    gpus = [g for g in topology.gpus if g.index in ring.order]
    if any((g.compute_capability or (0, 0)) < NVLS_MIN_CAPABILITY for g in gpus):
        return False
    versions = {_major_minor(i.nccl_version) for i in job.identities if i.nccl_version}
    return all(version is None or version >= NVLS_MIN_NCCL for version in versions)


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def bandwidth_tables(facts: FactSet) -> list[dict[str, object]]:
    """Per collective: nccl-tests' columns plus expected and % of expected, and the basis.
    `--format json` carries this as "bandwidth"; the table and markdown print it."""
    job = facts.job
    if job is None:
        return []
    tables = []
    for op, expectation in expectations(facts).items():
        rows = [row for row in job.bandwidth if row.op == op]
        tables.append(
            {
                "op": op,
                "ranks": job.nproc,
                "bus_factor": BUS_FACTORS.get(op, "?"),
                "expected_gbps": expectation.gbps,
                "basis": expectation.basis,
                "source": expectation.source,
                "error": job.bandwidth_errors.get(op),
                "rows": [
                    {
                        "size_bytes": row.size_bytes,
                        "count": row.count,
                        "dtype": row.dtype,
                        "redop": "sum" if op in ("all_reduce", "reduce_scatter") else "none",
                        "time_us": row.time_us,
                        "algbw_gbps": row.algbw_gbps,
                        "busbw_gbps": row.busbw_gbps,
                        "expected_gbps": expectation.gbps
                        if row.size_bytes >= BANDWIDTH_BOUND_BYTES
                        else None,
                        "percent_of_expected": expectation.percent(row.size_bytes, row.busbw_gbps),
                    }
                    for row in rows
                ],
            }
        )
    return tables
