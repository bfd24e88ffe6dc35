"""Records real multi-node runs across simulated hosts (tests/simulated_hosts.py) as
fixtures/jobs/multinode-*-nodeN.json, each node's own JSON report, and derives the setups two
namespaces on a CPU machine cannot produce by editing the healthy recording.

Run by hand as root: `python tests/record_multinode_fixtures.py [NAME...]`. Each file gets
"description" and "expect" (the DDP2xx-DDP4xx codes that must fire when it is judged again);
tests/test_job_rules.py checks them. A recording whose codes differ from the expectation is
reported, not written.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multinode_runs import PORT, run_nodes, static
from simulated_hosts import simulated_hosts

from ddp_doctor.judge import judge
from ddp_doctor.report_io import report_from_json

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"
FACTS = OUT.parent / "facts"
ONE = ("--nproc", "1")
DROP_PORT = (
    "add table inet ddm; add chain inet ddm input { type filter hook input priority 0; "
    f"policy accept; }}; add rule inet ddm input iifname eth1 tcp dport {PORT} drop"
)


def _scenario(
    description: str,
    expect: list[list[str]],
    args: list[list[str] | None],
    envs: list[dict[str, str]] | None = None,
    faults: list[str | None] | None = None,
    loopback: tuple[int, ...] = (),
    nft: bool = False,
    timeout: float = 40,
    hosts: int = 2,
) -> dict[str, Any]:
    return dict(
        hosts=hosts,
        description=description,
        expect=expect,
        args=args,
        envs=envs or [],
        faults=faults or [],
        loopback=loopback,
        nft=nft,
        timeout=timeout,
    )


def _slurm3(node: int) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "9001",
        "SLURM_NNODES": "3",
        "SLURM_NODEID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_JOB_NODELIST": "node[0-2]",
    }


RECORDED = {
    "healthy": _scenario(
        "2 nodes x 2 gloo ranks, static rendezvous, each host name on its veth address",
        [[], ["DDP217"]],  # node 1 carries node 0's verdict (an info: no NCCL on CPU)
        [static(0), static(1)],
    ),
    "loopback-fixed": _scenario(
        "both host names map to 127.0.1.1 (as Debian's installer writes /etc/hosts); the job "
        "ran with GLOO_SOCKET_IFNAME=eth1 and passed",
        [["DDP204"], ["DDP204", "DDP217"]],
        [static(0, 2, *ONE), static(1, 2, *ONE)],
        loopback=(0, 1),
    ),
    "loopback-as-is": _scenario(
        "both host names map to 127.0.1.1, run --as-is: gloo advertises 127.0.1.1, node 1's "
        "ranks are refused and node 0's wait until the bound",
        [["DDP202", "DDP204", "DDP206", "DDP218"], ["DDP202", "DDP204", "DDP216"]],
        [static(0, 2, *ONE, "--as-is"), static(1, 2, *ONE, "--as-is")],
        loopback=(0, 1),
        timeout=30,
    ),
    "gloo-ifname": _scenario(
        "GLOO_SOCKET_IFNAME=eth9 on node 1, which has no eth9; fixed to eth1 for the job",
        [["DDP205"], ["DDP205", "DDP217"]],
        [static(0, 2, *ONE), static(1, 2, *ONE)],
        envs=[{}, {"GLOO_SOCKET_IFNAME": "eth9"}],
    ),
    "node-missing": _scenario(
        "node 1 never starts; node 0's static rendezvous gives up",
        [["DDP202"]],
        [static(0, 2, *ONE), None],
        timeout=30,
    ),
    "three-node2-missing": _scenario(
        "SLURM allocation node[0-2]; node 2 never starts: named from the addresses connected "
        "to node 0's store",
        [["DDP202"], ["DDP202"]],
        [[*ONE], [*ONE], None],
        envs=[_slurm3(0), _slurm3(1), _slurm3(2)],
        timeout=30,
        hosts=3,
    ),
    "c10d-node1-missing": _scenario(
        "c10d rendezvous, node 1 never starts; node 0 hosts the endpoint and counts who came",
        [["DDP202"]],
        [["--nnodes", "2", "--rdzv-endpoint", f"node0:{PORT}", *ONE], None],
        timeout=30,
    ),
    "port-dropped": _scenario(
        "nft on node 0 drops the master port from eth1: node 1's connects time out",
        [["DDP202"], ["DDP211"]],
        [static(0, 2, *ONE), static(1, 2, *ONE)],
        nft=True,
        timeout=30,
    ),
    "torch-skew": _scenario(
        "node 1's rank reports torch 2.12.0 (the test suite's fault injector)",
        [["DDP306"], ["DDP217"]],
        [static(0, 2, *ONE), static(1, 2, *ONE)],
        faults=[None, "1:identity:torch=2.12.0"],
    ),
}


def record(name: str) -> None:
    spec = RECORDED[name]
    with simulated_hosts(spec["hosts"], loopback_own_name=spec["loopback"]) as hosts:
        if spec["nft"]:
            hosts.run_in(0, ["nft", DROP_PORT])
        runs = run_nodes(hosts, spec["args"], spec["envs"], spec["faults"], spec["timeout"])
    for node, run in enumerate(r for r in runs if r is not None):
        report = dict(run.report, description=spec["description"], expect=spec["expect"][node])
        write(f"multinode-{name}-node{node}", report)


def write(name: str, report: dict[str, Any]) -> None:
    found = codes_of(report)
    if found != sorted(report["expect"]):
        print(f"{name}: found {found}, expected {report['expect']}: not written")
        return
    text = json.dumps(report, indent=2) + "\n"
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):  # this machine's own paths
        text = text.replace(prefix, "/opt/venv")
    (OUT / f"{name}.json").write_text(text)
    print(name, found)


def codes_of(report: dict[str, Any]) -> list[str]:
    findings = judge(report_from_json(report).probes)
    return sorted({f.code for f in findings if f.code.startswith(("DDP2", "DDP3", "DDP4"))})


def probe(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in report["probes"] if p["probe"] == name)


def own_node(report: dict[str, Any], node: int) -> dict[str, Any]:
    """Node `node`'s own probes inside node 0's cluster facts, by probe name."""
    cluster = probe(report, "cluster")["facts"]
    entries = next(n for n in cluster["nodes"] if n["node_rank"] == node)["probes"]
    return {entry["probe"]: entry for entry in entries}


def _network(report: dict[str, Any]) -> dict[str, Any]:
    return probe(report, "network")["facts"]


def _docker_bridge(network: dict[str, Any]) -> None:
    network["interfaces"].append({"name": "docker0", "addresses": ["172.17.0.1"], "kind": "docker"})


def _hostname_on_docker(report: dict[str, Any]) -> None:
    network = _network(report)
    _docker_bridge(network)
    network["hostname_addresses"] = ["172.17.0.1"]


def _route_over_docker(report: dict[str, Any]) -> None:
    network = _network(report)
    _docker_bridge(network)
    network.update(route_address="172.17.0.1", route_interface="docker0")
    network["hostname_addresses"] = ["172.17.0.1"]


def _master_loopback(report: dict[str, Any]) -> None:
    network = _network(report)
    network.update(master_address="127.0.0.1", route_address=None, route_interface=None)


def _nccl_pick(report: dict[str, Any]) -> None:
    gpu_host = json.loads((FACTS / "healthy-8xh100.json").read_text())
    probe(report, "nvml").update(copy.deepcopy(probe(gpu_host, "nvml")))
    network = _network(report)
    network["interfaces"].insert(1, {"name": "eno1", "addresses": ["10.9.0.5"], "kind": "other"})


def _identities(report: dict[str, Any]) -> list[dict[str, Any]]:
    return probe(report, "job")["facts"]["identities"]


def _variables_differ(report: dict[str, Any]) -> None:
    for identity in _identities(report):
        if identity["host"] == "node1":
            identity["variables"] = {**identity["variables"], "NCCL_P2P_DISABLE": "1"}


def _two_libnccl(report: dict[str, Any]) -> None:
    _identities(report)[0]["nccl_libraries"] = [
        "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5",
    ]


def _gpu_models(report: dict[str, Any]) -> None:
    for identity in _identities(report):
        identity["gpu_name"] = (
            "NVIDIA A100-SXM4-80GB" if identity["host"] == "node0" else ("Tesla V100-SXM2-32GB")
        )


def _node_facts_lost(report: dict[str, Any]) -> None:
    cluster = probe(report, "cluster")["facts"]
    cluster["nodes"][1].update(reported=False, probes=[], applied_fixes={})


def _verdict_lost(report: dict[str, Any]) -> None:
    probe(report, "cluster")["facts"].update(verdict_received=False, verdict=[], node0_host=None)


def _world_size(report: dict[str, Any]) -> None:
    probe(report, "env")["facts"]["variables"]["WORLD_SIZE"] = "8"  # 2 nodes x 2 ranks is 4


def _pytorchjob_world_size(report: dict[str, Any]) -> None:
    """Kubeflow's PyTorchJob counts pods in WORLD_SIZE: 2 for 2 nodes, whatever their ranks."""
    probe(report, "env")["facts"]["variables"]["WORLD_SIZE"] = "2"
    probe(report, "plan")["facts"]["nodes"]["scheduler"] = "kubernetes"


Edit = Callable[[dict[str, Any]], None]
# (recording it starts from, edit, expected codes, description)
DERIVED: dict[str, tuple[str, Edit, list[str], str]] = {
    "multinode-hostname-on-docker-node1": (
        "multinode-healthy-node1",
        _hostname_on_docker,
        ["DDP212", "DDP217"],
        "node 1's host name resolves to its docker0 address 172.17.0.1",
    ),
    "multinode-route-over-docker-node1": (
        "multinode-healthy-node1",
        _route_over_docker,
        ["DDP213", "DDP217"],
        "node 1 reaches the master through docker0 (a container's address as master)",
    ),
    "multinode-master-loopback-node1": (
        "multinode-healthy-node1",
        _master_loopback,
        ["DDP214", "DDP217"],
        "node 1 resolves the master's name to 127.0.0.1",
    ),
    "multinode-nccl-pick-node0": (
        "multinode-healthy-node0",
        _nccl_pick,
        ["DDP215"],
        "a GPU node with a management NIC eno1 listed before eth1, which reaches the others",
    ),
    "multinode-variables-differ-node0": (
        "multinode-healthy-node0",
        _variables_differ,
        ["DDP309"],
        "NCCL_P2P_DISABLE=1 on node 1's ranks only",
    ),
    "multinode-two-libnccl-node0": (
        "multinode-healthy-node0",
        _two_libnccl,
        ["DDP310"],
        "rank 0 maps the nvidia-nccl wheel's libnccl and a system libnccl",
    ),
    "multinode-gpu-models-node0": (
        "multinode-healthy-node0",
        _gpu_models,
        ["DDP311"],
        "node 0's ranks on A100s, node 1's on V100s",
    ),
    "multinode-node-facts-lost-node0": (
        "multinode-healthy-node0",
        _node_facts_lost,
        ["DDP218"],
        "node 1's doctor facts never reached rank 0",
    ),
    "multinode-world-size-node0": (
        "multinode-healthy-node0",
        _world_size,
        ["DDP207"],
        "WORLD_SIZE=8 exported on node 0 for a run of 2 nodes x 2 ranks",
    ),
    "multinode-pytorchjob-world-size-node1": (
        "multinode-healthy-node1",
        _pytorchjob_world_size,
        ["DDP217"],
        "a PyTorchJob pod: WORLD_SIZE=2 counts the pods, not nnodes x nproc",
    ),
    "multinode-verdict-lost-node1": (
        "multinode-healthy-node1",
        _verdict_lost,
        ["DDP216"],
        "node 0's verdict never came back to node 1",
    ),
}


def derive(name: str) -> None:
    source, edit, expect, description = DERIVED[name]
    report = json.loads((OUT / f"{source}.json").read_text())
    edit(report)
    report["description"] = f"{description} (edited from {source})"
    report["expect"] = expect
    write(name, report)


def main() -> None:
    chosen = sys.argv[1:] or [*RECORDED, *DERIVED]
    for name in chosen:
        if name in RECORDED:
            record(name)
        else:
            derive(name)


if __name__ == "__main__":
    main()
