"""What DDP320-DDP325 and DDP303's causes read from the facts, case by case: what must fire and
what must stay silent (a uniform reduced NVLink count, a rank free to run anywhere, readings
taken while the GPUs were idle)."""

from __future__ import annotations

import dataclasses

from topology_builders import AMD, MIB, bus, facts_for, hgx, pairs, pcie_gpu

from ddp_doctor.facts.job import PeerAccess
from ddp_doctor.facts.machine import EnvFacts, FactSet, PlanFacts
from ddp_doctor.facts.topology import Fabric, GpuPair, NvLink, PcieSample
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.readings.topology_issues import (
    blocked_p2p,
    degraded_links,
    fabric_not_ready,
    far_ranks,
    nvlinks_down,
    transport_switches,
)


def with_topology(facts: FactSet, **changes: object) -> FactSet:
    topology = dataclasses.replace(facts.topology, **changes)  # type: ignore[arg-type]
    result = ProbeResult("topology", ProbeStatus.OK, topology, 0.1)
    return FactSet({**facts.results, "topology": result})


def with_result(facts: FactSet, probe: str, value: object) -> FactSet:
    return FactSet({**facts.results, probe: ProbeResult(probe, ProbeStatus.OK, value, 0.0)})


def four_under_a_switch(status: str = "ok", **job: object) -> FactSet:
    gpus = [pcie_gpu(i) for i in range(4)]
    return facts_for(gpus, pairs(gpus, "single", status), **job)  # type: ignore[arg-type]


# --- DDP322 ------------------------------------------------------------------------------------


def test_platform_statuses_below_a_switch_block_p2p_gpu_not_supported_does_not() -> None:
    found = blocked_p2p(four_under_a_switch("chipset-not-supported"))
    assert len(found) == 6 and found[0].why == "NVML P2P status chipset-not-supported"
    assert blocked_p2p(four_under_a_switch("gpu-not-supported")) == []
    assert blocked_p2p(four_under_a_switch("ok")) == []


def test_separate_iommu_groups_mean_acs_only_below_a_switch() -> None:
    facts = four_under_a_switch()
    gpus = tuple(dataclasses.replace(g, iommu_group=40 + g.index) for g in facts.topology.gpus)  # type: ignore[union-attr]
    assert {b.why for b in blocked_p2p(with_topology(facts, gpus=gpus))} == {
        "ACS isolates them in separate IOMMU groups, so the switch sends their P2P to the CPU"
    }
    across = pairs(list(gpus), "node")  # separate root ports: separate groups are normal
    assert blocked_p2p(with_topology(facts, gpus=gpus, pairs=across)) == []
    shared = tuple(dataclasses.replace(g, iommu_group=40) for g in gpus)
    assert blocked_p2p(with_topology(facts, gpus=shared)) == []


def test_cuda_refusing_peer_access_below_a_switch() -> None:
    denied = (PeerAccess(bus(0), bus(1), False),)
    found = blocked_p2p(four_under_a_switch(peer_access=denied))
    assert [(b.pair.a, b.pair.b) for b in found] == [(0, 1)]
    assert "CUDA refused" in found[0].why


def test_gpus_joined_by_nvlink_are_not_judged_on_pcie_p2p() -> None:
    facts = facts_for(
        hgx(4),
        tuple(
            GpuPair(a, b, "single", "not-supported", "not-supported")
            for a in range(4)
            for b in range(a + 1, 4)
        ),
    )
    assert blocked_p2p(facts) == []


# --- DDP321 ------------------------------------------------------------------------------------


def test_a_uniformly_reduced_link_count_is_not_a_link_down() -> None:
    """An H800 enables 8 of its links; if NVML lists the others as inactive on every GPU,
    nothing is down."""
    h800 = [
        dataclasses.replace(
            g, nvlinks=g.nvlinks[:8] + tuple(NvLink(i, False) for i in range(8, 18))
        )
        for g in hgx(8)
    ]
    assert nvlinks_down(facts_for(h800)) == []
    h800[3] = dataclasses.replace(h800[3], nvlinks=(*h800[3].nvlinks[:7], NvLink(7, False)))
    (found,) = nvlinks_down(facts_for(h800))
    assert (found.gpu.index, found.active, found.usual, found.down) == (3, 7, 8, (7,))


# --- DDP320 ------------------------------------------------------------------------------------


def test_links_are_judged_under_load_only_and_only_on_the_jobs_gpus() -> None:
    slow = PcieSample(gen=4, width=8, samples=5)
    facts = four_under_a_switch()
    gpus = list(facts.topology.gpus)  # type: ignore[union-attr]
    gpus[2] = dataclasses.replace(gpus[2], pcie_under_load=slow)
    assert [d.gpu.index for d in degraded_links(with_topology(facts, gpus=tuple(gpus)))] == [2]
    idle_only = four_under_a_switch()  # idle readings (gen1) and no sample: nothing judged
    assert degraded_links(idle_only) == []
    gloo = four_under_a_switch(backend="gloo")  # the ranks ran on CPUs: the GPUs were idle
    assert degraded_links(with_topology(gloo, gpus=tuple(gpus))) == []


# --- DDP323 ------------------------------------------------------------------------------------


def test_only_ranks_with_no_cpu_near_their_gpu_are_far() -> None:
    facts = four_under_a_switch()
    near = tuple(
        dataclasses.replace(g, cpu_affinity="0-15" if g.index < 2 else "16-31")
        for g in facts.topology.gpus
    )  # type: ignore[union-attr]
    facts = with_topology(facts, gpus=near)
    job = facts.job
    assert job is not None

    def bound(*cpus: str | None) -> FactSet:
        identities = tuple(
            dataclasses.replace(i, cpu_affinity=c)
            for i, c in zip(job.identities, cpus, strict=True)
        )
        return with_result(facts, "job", dataclasses.replace(job, identities=identities))

    assert far_ranks(bound("0-31", "0-31", "0-31", "0-31")) == []  # free to run anywhere
    assert far_ranks(bound("0-15", "0-15", "10-20", None)) == []  # some CPUs near; unknown
    assert [f.identity.rank for f in far_ranks(bound("16-31", "0-15", "0-15", "0-15"))] == [0, 2, 3]


# --- DDP325, DDP324 ------------------------------------------------------------------------------


def test_fabric_states() -> None:
    facts = facts_for(hgx(2))
    states = [Fabric("completed", 0), Fabric("in-progress", 0)]
    gpus = tuple(
        dataclasses.replace(g, fabric=f) for g, f in zip(facts.topology.gpus, states, strict=True)
    )  # type: ignore[union-attr]
    assert [g.index for g in fabric_not_ready(with_topology(facts, gpus=gpus))] == [1]
    failed = tuple(dataclasses.replace(g, fabric=Fabric("completed", 999)) for g in gpus)
    assert len(fabric_not_ready(with_topology(facts, gpus=failed))) == 2
    assert fabric_not_ready(facts) == []  # no fabric facts: not an NVSwitch system


def test_transport_switches_read_values_as_nccl_does() -> None:
    def names(**variables: str) -> list[str]:
        return [s.variable for s in transport_switches(EnvFacts(variables))]

    assert names(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="2") == [
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
    ]
    assert names(NCCL_P2P_DISABLE="0", NCCL_SHM_DISABLE="true", NCCL_NVLS_ENABLE="1") == []
    assert names(NCCL_P2P_LEVEL="loc", NCCL_NVLS_ENABLE="0") == [
        "NCCL_P2P_LEVEL",
        "NCCL_NVLS_ENABLE",
    ]
    assert names(NCCL_P2P_LEVEL="NVL") == []
    assert names(NCCL_ALGO="Ring", NCCL_PROTO="Simple", NCCL_NET="Socket") == [
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_NET",
    ]


# --- DDP303 ------------------------------------------------------------------------------------


def codes(facts: FactSet) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for finding in judge(list(facts.results.values())):
        found.setdefault(finding.code, []).append(dict(finding.evidence))
    return found


def test_low_busbw_with_nothing_to_blame_says_so() -> None:
    (low,) = codes(four_under_a_switch(busbw=5.0))["DDP303"]
    assert low["expected_gbps"] == 24.0 and "nothing in the topology" in low["causes"][0]
    assert "DDP303" not in codes(four_under_a_switch(busbw=20.0))


def test_latency_bound_sweeps_are_not_judged() -> None:
    facts = four_under_a_switch(busbw=0.5)
    job = facts.job
    assert job is not None
    small = tuple(dataclasses.replace(r, size_bytes=16 * MIB) for r in job.bandwidth)
    assert "DDP303" not in codes(
        with_result(facts, "job", dataclasses.replace(job, bandwidth=small))
    )


def test_min_busbw_is_an_absolute_floor_for_every_collective() -> None:
    facts = facts_for(
        [pcie_gpu(i) for i in range(2)], cpu=AMD, ops=("all_reduce", "all_gather"), busbw=30.0
    )
    floor = with_result(facts, "plan", PlanFacts(min_busbw_gbps=50.0))
    assert sorted(e["op"] for e in codes(floor)["DDP303"]) == ["all_gather", "all_reduce"]
    assert "DDP303" not in codes(with_result(facts, "plan", PlanFacts(min_busbw_gbps=20.0)))
