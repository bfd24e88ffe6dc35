"""run --isolate's pairs against their nodes' stated link rates (readings/isolation.py,
probes/job/links.py, DDP222): the sysfs readings on a fake /sys, the band of a pair, pairs slow
alike that the median cannot see, the fabric's rate for NCCL pairs, and the links through the
node documents and the folded report."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.codec import to_jsonable
from ddp_doctor.facts.cluster import ClusterFacts, ClusterNode, NodeLink, PairTest
from ddp_doctor.facts.folding import FOLD_AT, fold_cluster, unfold_cluster
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.job.links import fabric_gbit, interface_mbps, node_link
from ddp_doctor.readings.isolation import BAND_FLOOR_FABRIC, BAND_FLOOR_SOCKETS, pair_band
from ddp_doctor.run.isolation import isolation_facts

GBIT_100 = NodeLink("eth0", 100_000)


def fake_sys(tmp_path: Path, speeds: dict[str, str], ports: dict[str, tuple[str, str]]) -> Path:
    for name, speed in speeds.items():
        (tmp_path / "net" / name).mkdir(parents=True)
        (tmp_path / "net" / name / "speed").write_text(speed)
    for port, (state, rate) in ports.items():
        folder = tmp_path / "infiniband" / port.split("/")[0] / "ports" / port.split("/")[1]
        folder.mkdir(parents=True)
        (folder / "state").write_text(state)
        (folder / "rate").write_text(rate)
    return tmp_path


def test_the_stated_rates_are_read_from_sysfs(tmp_path: Path) -> None:
    root = fake_sys(
        tmp_path,
        {"eth0": "25000\n", "veth1": "10000\n", "lo": "-1\n", "odd": "fast\n"},
        {
            "mlx5_0/1": ("4: ACTIVE\n", "400 Gb/sec (4X NDR)\n"),
            "mlx5_1/1": ("1: DOWN\n", "800 Gb/sec (8X XDR)\n"),  # down: not counted
            "mlx5_2/1": ("4: ACTIVE\n", "200 Gb/sec (4X HDR)\n"),
        },
    )
    net, ib = root / "net", root / "infiniband"
    assert interface_mbps("eth0", net) == 25000 and interface_mbps("veth1", net) == 10000
    assert interface_mbps("lo", net) is interface_mbps("odd", net) is None
    assert interface_mbps("missing", net) is interface_mbps(None, net) is None
    assert interface_mbps("../../etc", net) is None
    assert fabric_gbit(ib) == 400.0 and fabric_gbit(root / "none") is None
    assert node_link("eth0", net, ib) == NodeLink("eth0", 25000, 400.0)


def test_a_pairs_band_is_its_slower_node_and_needs_both() -> None:
    links = {0: GBIT_100, 1: NodeLink("eth0", 25_000, 400.0), 2: NodeLink("eth0", None)}
    band = pair_band((0, 1), links, fabric=False)
    assert band is not None and band.gbps == 25_000 / 8000 and "node 1" in band.basis
    fabric = pair_band((0, 1), links, fabric=True)  # node 0 has no port: its interface counts
    assert fabric is not None and fabric.gbps == 100_000 / 8000
    assert pair_band((0, 2), links, fabric=False) is None
    assert pair_band((0, 3), links, fabric=False) is None


def judged(tests: list[PairTest], nodes: int, links: dict, backend: str = "gloo") -> set[str]:
    cluster = ClusterFacts(
        nnodes=nodes,
        node_rank=0,
        whole=True,
        nodes=tuple(
            ClusterNode(n, f"node{n}", (n,), True, link=links.get(n)) for n in range(nodes)
        ),
        isolation=isolation_facts(nodes, tests, links=links, backend=backend),
    )
    return {f.code for f in judge([ProbeResult("cluster", ProbeStatus.OK, cluster, 0.0)])}


def alike(gbps: float, nodes: int = 8) -> list[PairTest]:
    return [PairTest((n, n + 1), 1, True, True, gbps) for n in range(0, nodes, 2)]


def test_pairs_slow_alike_pass_the_median_but_not_their_band() -> None:
    links = {n: GBIT_100 for n in range(8)}
    facts = isolation_facts(8, alike(0.02), links=links, backend="gloo")
    assert facts.bad == () and facts.unsettled == ()  # the median sees nothing
    assert len(facts.under_band) == 4 and facts.banded_pairs == 4
    assert facts.band_floor == BAND_FLOOR_SOCKETS and len(facts.bands) == 4
    assert judged(alike(0.02), 8, links) == {"DDP222"}


def test_healthy_pairs_and_unknown_links_are_silent() -> None:
    links = {n: GBIT_100 for n in range(8)}
    healthy = isolation_facts(8, alike(3.0), links=links)
    assert healthy.under_band == () and healthy.bands == () and healthy.banded_pairs == 4
    assert judged(alike(3.0), 8, links) == set()
    unknown = isolation_facts(8, alike(0.02), links={})
    assert unknown.under_band == () and unknown.band_floor is None
    assert judged(alike(0.02), 8, {}) == set()


def test_a_bad_node_is_left_to_ddp219() -> None:
    """node2 throttled to 20 Mbit/s among fast nodes: DDP219 names it; its pairs are under the
    band too, but DDP222 stays silent about them."""
    links = {n: NodeLink("eth0", 10_000) for n in range(4)}  # veths state 10000 Mbit/s
    tests = [
        PairTest((0, 1), 1, True, True, 6.0),
        PairTest((2, 3), 1, True, True, 0.0024),
        PairTest((0, 2), 2, True, True, 0.0024),
        PairTest((1, 3), 2, True, True, 6.0),
        PairTest((1, 2), 3, True, True, 0.0024),  # slow twice beside good nodes: confirmed
    ]
    facts = isolation_facts(4, tests, links=links)
    assert facts.bad == (2,) and set(facts.under_band) == {(2, 3), (0, 2), (1, 2)}
    assert judged(tests, 4, links) == {"DDP219"}


def test_nccl_pairs_are_judged_against_the_fabric() -> None:
    links = {n: NodeLink("eth0", 10_000, 400.0) for n in range(8)}
    # 3 GB/s: far over 2% of eth0's 1.25 GB/s, but under 10% of the 50 GB/s the HCAs state
    assert judged(alike(3.0), 8, links, backend="gloo") == set()
    assert judged(alike(3.0), 8, links, backend="nccl") == {"DDP222"}
    facts = isolation_facts(8, alike(3.0), links=links, backend="nccl")
    assert facts.band_floor == BAND_FLOOR_FABRIC and "IB/RoCE" in facts.bands[0].basis


@pytest.mark.parametrize("link", [GBIT_100, None])
def test_the_link_survives_the_folded_report(link: NodeLink | None) -> None:
    nodes = [
        to_jsonable(ClusterNode(n, f"node{n:04d}", (2 * n, 2 * n + 1), True, link=link))
        for n in range(1, FOLD_AT + 8)
    ]
    cluster = {"nnodes": len(nodes), "nodes": nodes}
    folded = fold_cluster(cluster)
    assert "node_runs" in folded
    back = unfold_cluster(folded)
    assert sorted((n["node_rank"], n["link"]) for n in back["nodes"]) == [
        (n["node_rank"], n["link"]) for n in nodes
    ]


def test_node_documents_carry_the_link_into_the_cluster() -> None:
    from ddp_doctor.facts.job import JobFacts, Preflight, RankFacts
    from ddp_doctor.run.cluster_view import whole_cluster

    job = JobFacts(
        launched=True,
        preflight=Preflight("node0", "10.0.0.1", None, 29500, None, False),
        ranks=(RankFacts(0, node_rank=0), RankFacts(1, node_rank=1)),
    )
    document = {
        "group_world_size": 2,
        "nodes": {
            "0": {"host": "node0", "link": to_jsonable(GBIT_100)},
            "1": {"host": "node1", "link": {"interface": 3, "mbps": "x"}},  # malformed: none
        },
    }
    cluster = whole_cluster(job, document, node_rank=0)
    assert [node.link for node in cluster.nodes] == [GBIT_100, None]
