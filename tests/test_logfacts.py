"""Log text becomes facts, and the probes' own rule functions judge them (issue 21, item 1)."""

from __future__ import annotations

import dataclasses

from log_scans import codes

from ddp_doctor import registry
from ddp_doctor.logscan import LogScanner, scan_text
from ddp_doctor.logscan.factrules import shared_rule
from ddp_doctor.rules import collectives, rendezvous

GLOO_127011 = (
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:769] connect "
    "[127.0.1.1]:25472: Connection refused\n"
)  # pytorch/examples#812: two nodes, gloo


def test_the_log_rules_are_the_live_check_functions() -> None:
    assert shared_rule("DDP204") is rendezvous.hostname_is_loopback
    assert shared_rule("DDP306") is collectives.version_skew


def test_a_connection_to_127_0_1_1_gets_ddp204_from_the_live_rule() -> None:
    spec = registry.spec_for("DDP204")
    calls = []

    def spy(facts):  # the registered function, observed
        calls.append(facts)
        return rendezvous.hostname_is_loopback(facts)

    # only this entry is swapped (and back): mock.patch.dict would restore the whole table and
    # unregister rule modules loaded while it was patched
    registry.RULES["DDP204"] = dataclasses.replace(spec, check=spy)
    try:
        findings = scan_text(GLOO_127011)
    finally:
        registry.RULES["DDP204"] = spec
    assert registry.RULES["DDP204"] is spec
    assert findings[0].code == "DDP204"
    assert calls and calls[0].host.hostname_address == "127.0.1.1"
    assert findings[0].evidence["from_log_facts"]["advertised_address"] == "127.0.1.1"


def test_loopback_connections_on_one_host_are_not_ddp204() -> None:
    text = "[W socket.cpp:558] The client socket has failed to connect to [localhost]:29500\n"
    assert "DDP204" not in codes(text)


def test_gloo_loopback_fallback_on_a_cluster_is_ddp204() -> None:
    text = (  # vllm-project/vllm#7074
        "DEBUG parallel_state.py:803] distributed_init_method=tcp://10.41.0.7:34773\n"
        "(RayWorkerWrapper pid=1978, ip=10.41.0.8) [rank9]:[W ProcessGroupGloo.cpp:721] "
        "Warning: Unable to resolve hostname to a (local) address. Using the loopback address "
        "as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.\n"
    )
    assert codes(text)[0] == "DDP204"


# gloo's mesh refused at a peer's loopback address (aws-samples/aws-do-eks#69, hostNetwork pods;
# the user wrote <port> for the number), wrapped over three lines as pasted
MESH_REFUSED_AT_LOOPBACK = (
    "RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/"
    "tcp/pair.cc:152]\n"
    "  timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:<port>\n"
    "  (rank=8, size=16, local=[127.0.0.1])\n"
)


def test_a_mesh_refused_at_loopback_by_a_rank_bound_to_loopback_is_ddp204() -> None:
    findings = scan_text(MESH_REFUSED_AT_LOOPBACK)
    assert [f.code for f in findings][:1] == ["DDP204"]
    assert findings[0].evidence["from_log_facts"]["advertised_address"] == "127.0.0.1"


def test_a_mesh_refused_at_loopback_with_the_store_on_loopback_is_no_ddp204() -> None:
    text = (  # one host: the store on localhost, no sign of a second host or of gloo's address
        "[W socket.cpp:755] [c10d] The client socket has failed to connect to [localhost]:29500 "
        "(errno: 111 - Connection refused).\n"
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
        "pair.cc:144] Connection refused, remote=[127.0.0.1]:41853\n"
    )
    assert "DDP204" not in codes(text)


def test_nccl_versions_that_differ_between_hosts_are_ddp306() -> None:
    text = (
        "node-a:100:100 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n"
        "node-b:200:200 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
    )
    findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP306"]
    assert findings[0].evidence["per_host"] == {"node-a": "2.18.1", "node-b": "2.19.3"}


def test_one_nccl_version_everywhere_is_silent() -> None:
    text = (
        "node-a:100:100 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n"
        "node-b:200:200 [0] NCCL INFO NCCL version 2.18.1+cuda12.1\n"
    )
    assert codes(text) == []


def test_a_link_local_peer_is_ddp215() -> None:
    text = (  # NVIDIA/nccl#975
        "n122:12251:12400 [5] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to "
        "fe80::966d:ae03:a2:8cf0%ib1<17943> failed : Software caused connection abort\n"
    )
    assert codes(text)[0] == "DDP215"


def test_a_healthy_bootstrap_gives_facts_and_no_finding() -> None:
    scanner = LogScanner()
    scanner.feed(b"node-a:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n")
    assert scanner.findings() == []
    assert scanner.log_facts.lines() == {"interface eth0 10.0.0.5": 1}


def test_socket_ifname_without_an_address_is_ddp205() -> None:
    text = (  # NVIDIA/nccl#1837
        "host:1958:1958 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n"
        "ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor "
        "AF_INET6(10)\n"
    )
    findings = scan_text(text)
    assert findings[0].code == "DDP205"
    assert findings[0].evidence["from_log_facts"]["NCCL_SOCKET_IFNAME"] == "eth2"


def test_a_host_name_that_does_not_resolve_is_judged_by_the_live_ddp203_rule() -> None:
    assert shared_rule("DDP203") is rendezvous.master_addr_unresolvable
    text = (  # pytorch/pytorch#73682, Kubernetes DNS not yet propagated
        "[W socket.cpp:601] [c10d] The IPv4 network addresses of (worker-0.svc, 29500) cannot "
        "be retrieved (gai error: -2 - Name or service not known).\n"
    )
    findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP203"]
    assert findings[0].evidence["address"] == "worker-0.svc"


# Per host and node (issue 21, item 1): versions, the driver's CUDA, node ranks, world size. These
# are shown by `logs -v` with their lines; no rule judges them yet (no finding changes).
RENDEZVOUS = (  # torchrun's agent on node 0 of 2 (aws-samples awsome-distributed-training, cpu-ddp)
    "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for "
    "workers. Result:\n"
    "  restart_count=0\n"
    "  master_addr=ip-10-4-198-29.ec2.internal\n"
    "  master_port=58353\n"
    "  group_rank=0\n"
    "  group_world_size=2\n"
    "  local_ranks=[0, 1, 2, 3]\n"
    "  role_ranks=[0, 1, 2, 3]\n"
    "  global_ranks=[0, 1, 2, 3]\n"
    "  role_world_sizes=[8, 8, 8, 8]\n"
    "  global_world_sizes=[8, 8, 8, 8]\n"
    "\n"
    "[RANK 0] Epoch 0 | Batchsize: 32 | Steps: 8\n"
)
NCCL_VERSIONS = (  # the NCCL_DEBUG=INFO header lines of NCCL >= 2.14
    "gpu-a:1203:1203 [0] NCCL INFO cudaDriverVersion 12040\n"
    "gpu-a:1203:1203 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    "gpu-b:882:882 [0] NCCL INFO cudaDriverVersion 12020\n"
)
COLLECT_ENV = (  # torch.utils.collect_env, as pasted into issues
    "PyTorch version: 2.1.0+cu121\n"
    "CUDA used to build PyTorch: 12.1\n"
    "Nvidia driver version: 535.104.05\n"
)


def read(text: str) -> LogScanner:
    scanner = LogScanner()
    scanner.feed(text.encode())
    scanner.findings()
    return scanner


def test_torchrun_rendezvous_result_gives_master_world_size_and_the_node_ranks() -> None:
    facts = read(RENDEZVOUS).log_facts
    assert facts.rendezvous == {
        "master_addr": ("ip-10-4-198-29.ec2.internal", 3),
        "master_port": ("58353", 4),
        "group_world_size": ("2", 6),
    }
    assert facts.world_sizes == {"8": 11}
    assert facts.nodes == {0: ("[0, 1, 2, 3]", 9)}
    assert facts.following == 0
    assert "world size 8" in facts.lines()


def test_a_failure_right_after_the_rendezvous_result_is_still_found() -> None:
    header = RENDEZVOUS.split("\n")[0] + "\n  restart_count=0\n"
    assert codes(header + GLOO_127011) == codes(GLOO_127011)


def test_driver_and_nccl_cuda_versions_are_read_per_host() -> None:
    facts = read(NCCL_VERSIONS).log_facts
    assert facts.driver_cuda == {"gpu-a": ("12.4", 1), "gpu-b": ("12.2", 3)}
    assert facts.nccl_cuda == {"gpu-a": ("12.4", 2)}
    assert facts.nccl_versions == {"gpu-a": ("2.21.5", 2)}


def test_collect_env_versions_are_read() -> None:
    facts = read(COLLECT_ENV).log_facts
    assert facts.environment == {
        "torch": ("2.1.0+cu121", 1),
        "cuda_build": ("12.1", 2),
        "driver": ("535.104.05", 3),
    }


def test_version_facts_alone_change_no_finding() -> None:
    assert codes(RENDEZVOUS + NCCL_VERSIONS + COLLECT_ENV) == codes("")


def test_node_facts_stay_bounded_on_a_long_log() -> None:
    text = "".join(RENDEZVOUS.replace("group_rank=0", f"group_rank={node}") for node in range(200))
    facts = read(text).log_facts
    assert len(facts.nodes) == 64 and len(facts.lines()) <= 20


def test_in_a_folder_a_fact_finding_names_the_file_and_line_it_came_from(tmp_path) -> None:
    from ddp_doctor.logscan.inputs import scan_folder

    (tmp_path / "rank0.log").write_text("step 1\nstep 2\nstep 3\nstep 4\n")
    (tmp_path / "rank1.log").write_text("step 1\nstep 2\n" + GLOO_127011)
    (tmp_path / "rank2.log").write_text("step 1\n")
    scan = scan_folder(tmp_path)
    found = next(f for f in scan.findings if f.code == "DDP204")
    assert (found.location.path, found.location.line) == (str(tmp_path / "rank1.log"), 3)
    assert found.evidence["line"] == 3
    shown = scan.facts_read
    assert shown["connect 127.0.1.1:25472 refused"] == f"{tmp_path / 'rank1.log'}:3"


def test_logs_v_on_a_folder_lists_its_facts_by_file(invoke, tmp_path) -> None:
    import json

    (tmp_path / "rank0.log").write_text("step 1\n" + NCCL_VERSIONS)
    (tmp_path / "rank1.log").write_text(GLOO_127011)
    result = invoke("logs", "-v", str(tmp_path), "--format", "json")
    report = json.loads(result.output)
    text = json.dumps(report)
    assert "rank0.log:2" in text and "rank1.log:1" in text
    assert report["findings"][0]["code"] == "DDP204"
