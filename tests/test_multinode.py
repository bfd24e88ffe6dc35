"""Multi-node `ddp-doctor run` across simulated hosts: one doctor per network namespace, each
with its own host name and /etc/hosts (tests/simulated_hosts.py), joined by veth pairs.

Each test asserts codes and facts (never wording), that every node finished within --timeout
+ 5 s, and that no process is left in any namespace. Where namespaces cannot be made (not
root, no iproute2) the tests skip and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from multinode_runs import PORT, TIMEOUT_S, NodeRun, run_nodes, static
from simulated_hosts import SimulatedHosts, simulated_hosts, why_unavailable

UNAVAILABLE = why_unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no namespaces: {UNAVAILABLE}"),
]
BOUND_S = TIMEOUT_S + 5


@pytest.fixture
def two_hosts() -> Iterator[SimulatedHosts]:
    with simulated_hosts(2) as hosts:
        yield hosts


def assert_within_bound(*runs: NodeRun | None) -> None:
    for run in runs:
        if run is not None:
            assert run.elapsed < BOUND_S, f"a node took {run.elapsed:.1f} s"


def assert_whole_cluster(run: NodeRun, hosts: list[str], ranks: int) -> dict[str, Any]:
    cluster = run.facts("cluster")
    assert cluster["whole"] and cluster["node_rank"] == 0
    assert [n["host"] for n in cluster["nodes"]] == hosts
    assert all(n["reported"] for n in cluster["nodes"])
    job = run.facts("job")
    assert len(job["ranks"]) == ranks
    assert {i["host"] for i in job["identities"]} == set(hosts)
    return job


def every_stage_passed(job: dict[str, Any]) -> bool:
    return all(
        [s["stage"] for s in rank["stages"] if s["ok"]]
        == ["init", "identity", "allreduce", "ddp", "bandwidth", "memory"]
        for rank in job["ranks"]
    )


# --- healthy runs ---------------------------------------------------------------------------
def test_two_nodes_static_rendezvous(two_hosts: SimulatedHosts) -> None:
    node0, node1 = run_nodes(two_hosts, [static(0), static(1)])
    assert node0 and node1
    assert_within_bound(node0, node1)
    assert (node0.exit_code, node1.exit_code) == (0, 0), (node0.codes(), node1.codes())
    job = assert_whole_cluster(node0, ["node0", "node1"], ranks=4)
    assert every_stage_passed(job)
    assert [n["host"] for n in job["node_bandwidth"]] == ["node0", "node1"]
    assert job["inter_node_bandwidth"] and job["bandwidth"]
    member = node1.facts("cluster")
    assert member["verdict_received"] and not member["whole"]
    assert member["node0_host"] == "node0" and member["node_rank"] == 1
    assert [r["rank"] for r in node1.facts("job")["ranks"]] == [2, 3]
    plan = node1.facts("plan")["nodes"]
    assert plan["sources"]["node_rank"] == "--node-rank" and plan["rendezvous"] == "static"


def test_two_nodes_c10d_rendezvous(two_hosts: SimulatedHosts) -> None:
    c10d = ["--nnodes", "2", "--rdzv-endpoint", f"node0:{PORT}", "--nproc", "1"]
    node0, node1 = run_nodes(two_hosts, [c10d, c10d])
    assert node0 and node1
    assert_within_bound(node0, node1)
    assert (node0.exit_code, node1.exit_code) == (0, 0), (node0.codes(), node1.codes())
    job = assert_whole_cluster(node0, ["node0", "node1"], ranks=2)
    assert every_stage_passed(job)
    assert node1.facts("cluster")["verdict_received"]
    assert node0.facts("plan")["nodes"]["rendezvous"] == "c10d"


def test_slurm_allocation_needs_no_flags(two_hosts: SimulatedHosts) -> None:
    def slurm(node: int) -> dict[str, str]:
        return {
            "SLURM_JOB_ID": "4242",
            "SLURM_NNODES": "2",
            "SLURM_NODEID": str(node),
            "SLURM_PROCID": str(node),
            "SLURM_LOCALID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_JOB_NODELIST": "node[0-1]",
        }

    node0, node1 = run_nodes(two_hosts, [[], []], [slurm(0), slurm(1)])
    assert node0 and node1
    assert_within_bound(node0, node1)
    assert (node0.exit_code, node1.exit_code) == (0, 0), (node0.codes(), node1.codes())
    job = assert_whole_cluster(node0, ["node0", "node1"], ranks=4)
    assert job["inter_node_bandwidth"]
    plan = node0.facts("plan")["nodes"]
    assert plan["scheduler"] == "slurm" and plan["hosts"] == ["node0", "node1"]
    assert plan["master_addr"] == "node0" and plan["master_port"] == 20000 + 4242
    assert plan["sources"]["nnodes"] == "SLURM_NNODES"


# --- predicted failures, fixed and not --------------------------------------------------------
def test_host_names_on_loopback_are_fixed_and_the_fix_verified() -> None:
    with simulated_hosts(2, loopback_own_name=(0, 1)) as hosts:
        node0, node1 = run_nodes(
            hosts, [static(0, 2, "--nproc", "1"), static(1, 2, "--nproc", "1")]
        )
    assert node0 and node1
    assert_within_bound(node0, node1)
    for run, host in ((node0, "node0"), (node1, "node1")):
        (own,) = [f for f in run.findings("DDP204") if f["evidence"]["hostname"] == host]
        assert own["evidence"]["address"] == "127.0.1.1"
        assert own["evidence"]["fix"] == "GLOO_SOCKET_IFNAME=eth1"
        assert own["evidence"]["fix_verified"] is True
        assert run.facts("job")["applied_fixes"] == {"GLOO_SOCKET_IFNAME": "eth1"}
    assert sorted(f["evidence"]["hostname"] for f in node0.findings("DDP204")) == ["node0", "node1"]
    assert every_stage_passed(node0.facts("job"))
    assert (node0.exit_code, node1.exit_code) == (0, 0)  # DDP204 is a warning


def test_host_names_on_loopback_as_is_reproduce_the_failure() -> None:
    with simulated_hosts(2, loopback_own_name=(0, 1)) as hosts:
        args = [static(n, 2, "--nproc", "1", "--as-is") for n in (0, 1)]
        node0, node1 = run_nodes(hosts, args, timeout=30)
    assert node0 and node1
    for run in (node0, node1):
        assert run.elapsed < 30 + 5
        (own, *_) = run.findings("DDP204")
        assert own["evidence"]["fix_applied"] is False
        assert run.facts("job")["applied_fixes"] == {}
        assert run.exit_code == 1  # the job failed: an error names it


def test_gloo_interface_naming_nothing_on_one_node(two_hosts: SimulatedHosts) -> None:
    wrong = {"GLOO_SOCKET_IFNAME": "eth9"}
    args = [static(0, 2, "--nproc", "1"), static(1, 2, "--nproc", "1")]
    node0, node1 = run_nodes(two_hosts, args, [{}, wrong])
    assert node0 and node1
    assert_within_bound(node0, node1)
    (own,) = node1.findings("DDP205")
    assert own["evidence"]["variable"] == "GLOO_SOCKET_IFNAME"
    assert own["evidence"]["value"] == "eth9" and own["evidence"]["fix_verified"] is True
    (seen,) = node0.findings("DDP205")
    assert seen["evidence"]["nodes"] == [1]
    assert not [f for f in node0.findings("DDP205") if 0 in f["evidence"]["nodes"]]
    assert (node0.exit_code, node1.exit_code) == (1, 1)  # an error on one node fails both
    (verdict,) = node1.findings("DDP217")
    assert "DDP205" in verdict["evidence"]["codes"]


# --- nodes that never meet -------------------------------------------------------------------
def test_a_node_that_never_starts_is_named(two_hosts: SimulatedHosts) -> None:
    node0, _ = run_nodes(two_hosts, [static(0, 2, "--nproc", "1"), None], timeout=30)
    assert node0 is not None
    assert node0.elapsed < 30 + 5
    (finding,) = node0.findings("DDP202")
    assert finding["evidence"]["missing_nodes"] == [1]
    assert node0.exit_code == 1


def test_of_three_slurm_nodes_the_one_missing_is_named_by_every_node_that_came() -> None:
    """torchrun's store counts the nodes that came; the doctor names the missing one from the
    addresses connected to node 0's store and the host list SLURM gives."""

    def slurm(node: int) -> dict[str, str]:
        nodelist = {"SLURM_JOB_NODELIST": "node[0-2]", "SLURM_JOB_ID": "9001"}
        return {**nodelist, "SLURM_NNODES": "3", "SLURM_NODEID": str(node), "SLURM_LOCALID": "0"}

    with simulated_hosts(3) as hosts:
        args = [["--nproc", "1"], ["--nproc", "1"], None]
        node0, node1, _ = run_nodes(hosts, args, [slurm(0), slurm(1), slurm(2)], timeout=30)
    for run in (node0, node1):
        assert run is not None
        assert run.elapsed < 30 + 5 and run.exit_code == 1
        (missing,) = run.findings("DDP202")
        assert missing["evidence"]["missing_nodes"] == [2]
        assert missing["evidence"]["hosts"] == ["node2"]


def test_master_port_dropped_by_a_firewall() -> None:
    if not _has_nft():
        pytest.skip("nft (nftables) is not installed: .ci/run installs it")
    with simulated_hosts(2) as hosts:
        rules = f"add table inet ddm; add chain inet ddm input {{ type filter hook input priority 0; policy accept; }}; add rule inet ddm input iifname eth1 tcp dport {PORT} drop"
        made = hosts.run_in(0, ["nft", rules])
        assert made.returncode == 0, made.stderr
        args = [static(0, 2, "--nproc", "1"), static(1, 2, "--nproc", "1")]
        node0, node1 = run_nodes(hosts, args, timeout=30)
    assert node0 and node1
    for run in (node0, node1):
        assert run.elapsed < 30 + 5
        assert run.exit_code == 1
    (unreachable,) = node1.findings("DDP211")
    assert unreachable["evidence"]["outcome"] == "timed-out"
    assert not node1.facts("job")["launched"]
    (missing,) = node0.findings("DDP202")
    assert missing["evidence"]["missing_nodes"] == [1]


def _has_nft() -> bool:
    from shutil import which

    return which("nft") is not None


# --- fingerprints ------------------------------------------------------------------------------
def test_a_node_with_another_torch_is_named(two_hosts: SimulatedHosts) -> None:
    """Planned from a Kubeflow PyTorchJob's variables, with no flags."""

    def pod(node: int) -> dict[str, str]:
        return {
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "PET_NNODES": "2",
            "PET_NODE_RANK": str(node),
            "PET_NPROC_PER_NODE": "1",
            "MASTER_ADDR": "node0",
            "MASTER_PORT": PORT,
        }

    faults = [None, "1:identity:torch=2.12.0"]
    node0, node1 = run_nodes(two_hosts, [[], []], [pod(0), pod(1)], faults=faults)
    assert node0 and node1
    assert_within_bound(node0, node1)
    plan = node0.facts("plan")
    assert plan["nproc"] == 1 and plan["nodes"]["scheduler"] == "kubernetes"
    (skew,) = [f for f in node0.findings("DDP306") if f["evidence"]["field"] == "torch_version"]
    assert skew["evidence"]["per_host"]["node1"] == "2.12.0"
    assert skew["evidence"]["per_host"]["node0"] != "2.12.0"
    assert (node0.exit_code, node1.exit_code) == (1, 1)
    (verdict,) = node1.findings("DDP217")
    assert verdict["severity"] == "error" and "DDP306" in verdict["evidence"]["codes"]
