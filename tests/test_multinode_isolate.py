"""`run --isolate` on four simulated hosts (network namespaces on a bridge of its own, each
with its own host name and /etc/hosts): one host's link throttled to 20 Mbit/s, one host cut
off by its firewall, and a healthy cluster. Node 0's report must name the bad host alone with
an exclude list, or say every pair passed. One real run per case, one at a time; every process
is killed and every namespace removed even when a test fails (tests/simulated_hosts.py)."""

from __future__ import annotations

from shutil import which
from typing import Any

import pytest
from multinode_runs import ISOLATE_TIMEOUT_S, NodeRun, isolate_on_four_hosts, namespaces_left
from simulated_hosts import why_unavailable

UNAVAILABLE = why_unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no namespaces: {UNAVAILABLE}"),
]


def run_case(fault: str) -> list[NodeRun]:
    runs, used = isolate_on_four_hosts(fault)
    assert namespaces_left(used) == []
    assert len(runs) == 4
    for run in runs:
        assert run.elapsed < ISOLATE_TIMEOUT_S + 5, f"a node took {run.elapsed:.1f} s"
    return runs


def isolation(run: NodeRun) -> dict[str, Any]:
    cluster = run.facts("cluster")
    assert cluster["whole"] and cluster["isolation"] is not None
    return cluster["isolation"]


def assert_node2_named_alone(runs: list[NodeRun]) -> dict[str, Any]:
    node0 = runs[0]
    (found,) = node0.findings("DDP219")
    assert found["evidence"]["nodes"] == [2], isolation(node0)["pairs"]
    assert found["evidence"]["hosts"] == ["node2"]
    assert found["evidence"]["srun"] == "--exclude=node2"
    assert "-e node2 hostfile" in found["evidence"]["hostfile"]
    assert found["evidence"]["kubernetes"].startswith("kubectl taint nodes node2 ")
    assert {"DDP220", "DDP222"} & set(node0.codes()) == set()  # node2's pairs are DDP219's
    facts = isolation(node0)
    assert facts["bad"] == [2] and facts["unsettled"] == []
    for run in runs:
        assert run.exit_code == 1
    for member in runs[1:]:
        (verdict,) = member.findings("DDP217")
        assert "DDP219" in verdict["evidence"]["codes"]
    return facts


def pairs_with(facts: dict[str, Any], node: int) -> list[dict[str, Any]]:
    return [pair for pair in facts["pairs"] if node in pair["nodes"]]


def test_a_throttled_link_names_its_host_alone() -> None:
    if which("tc") is None:
        pytest.skip("tc (iproute2) is not installed")
    facts = assert_node2_named_alone(run_case("throttled"))
    median = facts["median_gbps"]
    for pair in facts["pairs"]:
        assert pair["connected"] and pair["exact"]
        slow = pair["gbps"] < facts["slow_below"] * median
        assert slow == (2 in pair["nodes"])
    assert all(p["gbps"] < 0.0026 for p in pairs_with(facts, 2))  # 20 Mbit/s is 0.0025 GB/s


def test_a_host_cut_off_by_its_firewall_cannot_connect() -> None:
    if which("nft") is None:
        pytest.skip("nft (nftables) is not installed: .ci/run installs it")
    facts = assert_node2_named_alone(run_case("cut-off"))
    for pair in facts["pairs"]:
        assert pair["connected"] == (2 not in pair["nodes"])


def test_a_healthy_cluster_passes_every_pair_with_the_spread() -> None:
    runs = run_case("healthy")
    facts = isolation(runs[0])
    for run in runs:
        assert run.exit_code == 0, (run.codes(), facts["pairs"])
        assert {"DDP219", "DDP220", "DDP222"} & set(run.codes()) == set(), facts["pairs"]
    assert facts["under_band"] == []
    assert facts["bad"] == [] and facts["unsettled"] == [], facts["pairs"]
    first = [tuple(p["nodes"]) for p in facts["pairs"] if p["round"] == 1]
    assert sorted(first) == [(0, 1), (2, 3)]
    assert all(p["connected"] and p["exact"] and p["gbps"] > 0 for p in facts["pairs"])
    # a pair slowed by this shared machine's load is retested beside others, never named
    slow = [p for p in facts["pairs"] if p["gbps"] < facts["slow_below"] * facts["median_gbps"]]
    assert facts["rounds"] == (2 if slow else 1), facts["pairs"]
    job = runs[0].facts("job")
    assert all(rank["stages"][0]["stage"] == "isolate" for rank in job["ranks"])
    assert all(len(rank["stages"]) == 7 for rank in job["ranks"])
