"""The expected bus bandwidth: NCCL's link model, the best ring, NVLS, the band, and "no
expectation" wherever the facts do not say enough; checked against published nccl-tests
results."""

from __future__ import annotations

import itertools

import pytest
from topology_builders import (
    AMD,
    GIB,
    INTEL,
    MIB,
    bus,
    facts_for,
    hgx,
    meshed,
    pairs,
    pcie_gpu,
    switch_gpu,
)

from ddp_doctor.facts.job import PeerAccess
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.topology import TopologyFacts
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.readings.expected_busbw import (
    FLOOR_AT_PEAK,
    PUBLISHED,
    Expectation,
    bandwidth_tables,
    expectations,
)
from ddp_doctor.readings.ring_model import Edge, best_ring, pcie_gbps


def expected(facts: FactSet, op: str = "all_reduce") -> Expectation:
    return expectations(facts)[op]


# --- published results ---------------------------------------------------------------------------

SETUPS = {
    "8x H100 SXM, NVLink 4 via NVSwitch, NVLS": lambda: facts_for(hgx()),
    "8x H100 SXM, NVLink 4 via NVSwitch, ring": lambda: facts_for(hgx(), ops=("all_gather",)),
    "8x H200, NVLink 4 via NVSwitch, NVLS": lambda: facts_for(hgx()),
    "8x H800, 8 NVLinks via NVSwitch, NVLS": lambda: facts_for(hgx(links=8)),
    "8x A100 SXM, NVLink 3 via NVSwitch": lambda: facts_for(hgx(links=12, capability=(8, 0))),
}


@pytest.mark.parametrize("published", PUBLISHED, ids=lambda p: p.setup)
def test_published_results_sit_inside_the_band(published: object) -> None:
    facts = SETUPS[published.setup]()  # type: ignore[attr-defined]
    model = expected(facts, published.op)  # type: ignore[attr-defined]
    assert model.gbps is not None and model.path is not None
    figure = published.busbw_gbps  # type: ignore[attr-defined]
    assert figure >= model.gbps * FLOOR_AT_PEAK[model.path], "a healthy machine would trip DDP303"
    assert figure <= model.gbps * 1.05, "the model undersells the hardware"


def test_every_published_row_has_a_setup() -> None:
    assert {p.setup for p in PUBLISHED} == set(SETUPS)


# --- NVLink ------------------------------------------------------------------------------------


def test_nvls_only_for_eight_hopper_gpus_and_a_recent_nccl() -> None:
    assert expected(facts_for(hgx())).gbps == 480.0
    assert expected(facts_for(hgx())).source == "NVIDIA/nccl-tests#212"
    assert expected(facts_for(hgx(count=4))).gbps == 370.8  # no published figure for 4: ring
    assert expected(facts_for(hgx(), nccl="2.16.2")).gbps == 370.8
    assert expected(facts_for(hgx(links=12, capability=(8, 0)))).gbps == 240.0


def test_a_gpu_with_a_link_down_sets_the_ring() -> None:
    gpus = hgx()
    gpus[5] = switch_gpu(5, links=17)
    ring = expected(facts_for(gpus, ops=("all_gather",)), "all_gather")
    assert ring.gbps == round(17 * 20.6, 1) and "GPU 5" in str(ring.bottleneck)


def test_full_nvlink_mesh_counts_every_link() -> None:
    four = meshed([pcie_gpu(i) for i in range(4)], links_per_pair=4)  # HGX A100 4-GPU board
    assert expected(facts_for(four, pairs(four))).gbps == 12 * 20.0
    bridged = meshed([pcie_gpu(i, capability=(8, 6)) for i in range(2)], links_per_pair=4)
    assert expected(facts_for(bridged, pairs(bridged))).gbps == 4 * 12.0  # SM86: 12 GB/s a link


def test_all_to_all_only_behind_nvswitch() -> None:
    assert expected(facts_for(hgx(), ops=("all_to_all",)), "all_to_all").gbps == 370.8
    gpus = [pcie_gpu(i) for i in range(4)]
    pcie = expected(facts_for(gpus, pairs(gpus, "single"), ops=("all_to_all",)), "all_to_all")
    assert pcie.gbps is None and pcie.basis.startswith("no expectation")


# --- PCIe --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gen", "width", "gbps"),
    [(1, 16, 3.0), (3, 16, 12.0), (4, 16, 24.0), (4, 8, 12.0), (5, 16, 48.0), (6, 16, 96.0)],
)
def test_pcie_rates_are_nccls(gen: int, width: int, gbps: float) -> None:
    assert pcie_gbps(gen, width) == gbps


def test_p2p_below_a_switch_is_the_link_rate() -> None:
    gpus = [pcie_gpu(i) for i in range(4)]
    got = expected(facts_for(gpus, pairs(gpus, "single")))
    assert (got.gbps, got.path) == (24.0, "pcie-p2p")


def test_without_p2p_a_shared_switch_uplink_halves_it() -> None:
    gpus = [pcie_gpu(i, capability=(8, 9)) for i in range(2)]
    got = expected(facts_for(gpus, pairs(gpus, "single", "gpu-not-supported")))
    assert (got.gbps, got.path) == (12.0, "host-memory")


def test_a_platform_block_below_a_switch_expects_p2p() -> None:
    """ACS, the IOMMU or a VM is fixable (DDP322): the expectation is what P2P gives."""
    gpus = [pcie_gpu(i) for i in range(2)]
    got = expected(facts_for(gpus, pairs(gpus, "single", "chipset-not-supported")))
    assert (got.gbps, got.path) == (24.0, "pcie-p2p")


def test_intel_uses_no_p2p_across_host_bridges_amd_does() -> None:
    gpus = [pcie_gpu(i) for i in range(2)]
    intel = expected(facts_for(gpus, pairs(gpus, "node"), cpu=INTEL))
    amd = expected(facts_for(gpus, pairs(gpus, "node"), cpu=AMD))
    assert (intel.gbps, intel.path) == (24.0, "host-memory")
    assert (amd.gbps, amd.path) == (24.0, "pcie-p2p")


def test_crossing_sockets_costs_the_cpu_link() -> None:
    gpus = [pcie_gpu(i) for i in range(4)]
    socket = lambda a, b: "node" if a // 2 == b // 2 else "system"  # noqa: E731
    assert expected(facts_for(gpus, pairs(gpus, socket), cpu=AMD)).gbps == 16.0
    assert expected(facts_for(gpus, pairs(gpus, socket), cpu=INTEL)).gbps == 10.0
    unknown = expected(facts_for(gpus, pairs(gpus, socket), cpu="Hygon C86 7285"))
    assert unknown.gbps is None and "between sockets is unknown" in unknown.basis


def test_cuda_refusing_peer_access_means_host_memory() -> None:
    gpus = [pcie_gpu(i) for i in range(2)]
    denied = (PeerAccess(bus(0), bus(1), False), PeerAccess(bus(1), bus(0), False))
    got = expected(facts_for(gpus, pairs(gpus, "node"), cpu=AMD, peer_access=denied))
    assert got.path == "host-memory"


def test_best_ring_avoids_slow_pairs() -> None:
    fast, slow = Edge(24.0, "pcie-p2p", "fast"), Edge(6.0, "host-memory", "slow")
    edges = {pair: fast for pair in itertools.combinations(range(4), 2)}
    edges[(0, 1)] = edges[(2, 3)] = slow
    ring = best_ring(edges, [0, 1, 2, 3])
    assert ring.bottleneck is fast and ring.order in ((0, 2, 1, 3), (0, 3, 1, 2))


# --- no expectation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        (lambda: facts_for(hgx(), backend="gloo"), "gloo"),
        (lambda: facts_for(hgx(), hosts=2), "2 hosts"),
        (lambda: facts_for(hgx(), topology=False), "no driver"),
        (lambda: facts_for(hgx()[:1]), "one GPU"),
    ],
    ids=["gloo", "two-hosts", "no-topology", "one-gpu"],
)
def test_no_expectation_says_why(facts: object, reason: str) -> None:
    got = expected(facts())  # type: ignore[operator]
    assert got.gbps is None and got.basis.startswith("no expectation") and reason in got.basis


def test_a_gpu_missing_from_nvml_is_no_expectation() -> None:
    facts = facts_for(hgx())
    topology = facts.topology
    assert topology is not None
    shrunk = ProbeResult("topology", ProbeStatus.OK, TopologyFacts(topology.gpus[:7]), 0.1)
    got = expected(FactSet({**facts.results, "topology": shrunk}))
    assert got.gbps is None and "rank 7" in got.basis


# --- the band and the tables -------------------------------------------------------------------


def test_floor_depends_on_size_and_path() -> None:
    link = Expectation("all_reduce", 100.0, "x", "pcie-p2p")
    memory = Expectation("all_reduce", 100.0, "x", "host-memory")
    assert link.floor_gbps(16 * MIB) is None and link.percent(16 * MIB, 50.0) is None
    assert link.floor_gbps(256 * MIB) == 50.0 and link.floor_gbps(GIB) == 70.0
    assert memory.floor_gbps(256 * MIB) == 25.0 and memory.floor_gbps(4 * GIB) == 35.0
    assert link.percent(256 * MIB, 42.0) == 42.0


def test_tables_carry_expected_and_percent_from_64_mib() -> None:
    (table,) = bandwidth_tables(facts_for(hgx(), busbw=240.0))
    assert table["op"] == "all_reduce" and table["bus_factor"] == "2(n-1)/n"
    assert table["expected_gbps"] == 480.0
    small, large = table["rows"]  # type: ignore[misc]
    assert (small["expected_gbps"], small["percent_of_expected"]) == (None, None)
    assert (large["expected_gbps"], large["percent_of_expected"]) == (480.0, 50.0)
