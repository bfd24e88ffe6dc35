"""DDP205, DDP215 and DDP230: one judgement for the live run and for `logs` (issue 21, item 1).

Their live checks need facts a log only partly has (the route to the master, the host's own
interface list, the preflight's bind), so each was split into a pure function over what both
sources show; a spy on that function must see a call from the live rule on a recorded job
report (fixtures/jobs) and from the log scan on a real log's lines (sources beside each text).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ddp_doctor.judge import judge
from ddp_doctor.logscan import scan_text
from ddp_doctor.readings import interface_reach
from ddp_doctor.report_io import report_from_json
from ddp_doctor.rules import rendezvous

JOBS = Path(__file__).parent.parent / "fixtures" / "jobs"


def live_codes(name: str) -> list[str]:
    report = report_from_json(json.loads((JOBS / f"{name}.json").read_text()))
    return [f.code for f in judge(report.probes) if f.code.startswith("DDP2")]


def spy_on(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[tuple]:
    """Calls of module.name, observed (the function itself still runs)."""
    real, calls = getattr(module, name), []

    def spy(*args, **kwargs):
        calls.append(args + tuple(kwargs.values()))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


# --- DDP215: NCCL's own choice of interface ---------------------------------------------------
NCCL_ON_LOOPBACK_TWO_NODES = (  # NCCL's line when it found only lo (NVIDIA/nccl-tests#217)
    "torchrun --nnodes=2 --node_rank=0 --master_addr=10.0.0.5 train.py\n"
    "gpu-1:70918:70928 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
)


def test_ddp215_live_and_from_a_log_is_one_function(monkeypatch) -> None:
    calls = spy_on(monkeypatch, interface_reach, "nccl_choice_unreachable")
    assert live_codes("multinode-nccl-pick-node0") == ["DDP215"]
    live = list(calls)
    assert live and live[0][1] is not None  # the preflight knows the route to the master
    findings = scan_text(NCCL_ON_LOOPBACK_TWO_NODES)
    assert findings[0].code == "DDP215"
    from_log = calls[len(live) :]
    assert from_log and from_log[0][1] is None  # a log never shows the route
    assert [i.name for i in from_log[0][0]] == ["lo"]


def test_one_unroutable_interface_on_one_host_is_silent_in_a_log() -> None:
    assert scan_text("host:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n") == []


# --- DDP205: NCCL_SOCKET_IFNAME that selects nothing usable ------------------------------------
NO_FAMILY_ADDRESS = (  # NVIDIA/nccl#1837: the variable selected none of the host's interfaces
    "host:1958:1958 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth2\n"
    "ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor "
    "AF_INET6(10)\n"
)
ONLY_LOOPBACK_BY_VARIABLE = (  # a two-node launch with NCCL_SOCKET_IFNAME=lo (corpus_e's family)
    "torchrun --nnodes=2 --node_rank=1 --master_addr=10.0.0.5 train.py\n"
    "gpu-2:70918:70918 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo\n"
    "gpu-2:70918:70928 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
)


def test_ddp205_live_and_from_a_log_is_one_function(monkeypatch) -> None:
    calls = spy_on(monkeypatch, interface_reach, "socket_ifname_problem")
    assert live_codes("socket-ifname-missing") == ["DDP205"]
    assert calls[0][:2] == ("NCCL_SOCKET_IFNAME", "ib9")
    assert [i.name for i in calls[0][2]] == ["eth0", "lo"]  # the host's own list
    del calls[:]
    assert scan_text(NO_FAMILY_ADDRESS)[0].code == "DDP205"
    assert calls == [("NCCL_SOCKET_IFNAME", "eth2", (), False)]
    del calls[:]
    assert scan_text(ONLY_LOOPBACK_BY_VARIABLE)[0].code == "DDP205"
    assert calls[0][1] == "lo" and calls[0][3] is True  # the run spans hosts


def test_the_shared_ddp205_judgement() -> None:
    lo, eth = interface_reach.Interface("lo", ("127.0.0.1",)), interface_reach.Interface("eth0")
    judged = interface_reach.socket_ifname_problem
    assert judged("NCCL_SOCKET_IFNAME", "ib", [lo, eth], False) == interface_reach.NO_MATCH
    assert judged("NCCL_SOCKET_IFNAME", "^eth,lo", [lo, eth], False) == interface_reach.NO_MATCH
    assert judged("NCCL_SOCKET_IFNAME", "lo", [lo, eth], True) == interface_reach.ONLY_UNROUTABLE
    assert judged("NCCL_SOCKET_IFNAME", "lo", [lo, eth], False) is None  # one host: it works
    assert judged("GLOO_SOCKET_IFNAME", "eth0,eth1", [eth], False) == interface_reach.NO_MATCH


# --- DDP230: a master port below 1024 ----------------------------------------------------------
PORT_98_CLIENT = (  # KimMeen/Time-LLM#158's --main_process_port 98, seen from a client
    "accelerate launch --num_processes 2 --main_process_port 98 run_main.py\n"
    "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
    "while trying to connect to (127.0.0.1, 98).\n"
)


def test_ddp230_live_and_from_a_log_is_one_function(monkeypatch) -> None:
    calls = spy_on(monkeypatch, rendezvous, "privileged_port_refused")
    assert live_codes("master-port-privileged") == ["DDP230"]  # not DDP208's "not local" fix
    assert calls[-1][:2] == (98, "EACCES: cannot listen on 127.0.0.1:98: Permission denied")
    del calls[:]
    assert scan_text(PORT_98_CLIENT)[0].code == "DDP230"
    assert calls == [(98, None, True)]


def test_the_shared_ddp230_judgement() -> None:
    judged = rendezvous.privileged_port_refused
    assert judged(98, "EACCES: cannot listen on 127.0.0.1:98: Permission denied", False)
    assert not judged(98, None, False)  # below 1024, but nothing failed (root, or a container)
    assert not judged(29500, "EACCES: ...", True)
    assert not judged(0, None, True)  # 0: any free port
    assert not judged(80, "EADDRINUSE: cannot listen on *:80: Address already in use", False)


# --- DDP210: no route to the address connected to ----------------------------------------------
def test_no_route_in_a_log_is_judged_by_the_live_network_unreachable(monkeypatch) -> None:
    from ddp_doctor import registry
    from ddp_doctor.logscan.factrules import shared_rule
    from ddp_doctor.rules import network

    assert shared_rule("DDP210") is network.network_unreachable
    spec, calls = registry.spec_for("DDP210"), []

    def spy(facts):
        calls.append(facts)
        return spec.check(facts)

    monkeypatch.setitem(registry.RULES, "DDP210", dataclasses.replace(spec, check=spy))
    text = (  # torch 2.x's client, as a recorded job printed it (fixtures/jobs/network-unreachable-in-job)
        "[W1130 13:12:39.248514189 socket.cpp:764] [c10d] The client socket has failed to connect "
        "to 2.86.0.0:57063 (errno: 101 - Network is unreachable).\n"
    )
    findings = scan_text(text)
    assert findings[0].code == "DDP210" and "Network is unreachable" in calls[0].job.output_tail
    assert findings[0].evidence["from_log_facts"]["line"] == 1


def test_a_log_with_no_unreachable_line_gets_no_ddp210() -> None:
    text = "[W socket.cpp:601] [c10d] The client socket has failed to connect to [node-0]:29500 (errno: 111 - Connection refused).\n"
    assert "DDP210" not in [f.code for f in scan_text(text)]


def test_an_infiniband_call_with_no_route_is_the_fabrics_not_ddp210() -> None:
    text = (  # NVIDIA/nccl-tests#185's RoCE QP setup (corpus_families labels it DDP514)
        "dgxh100-3:225140:225355 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed "
        "with error Network is unreachable\n"
    )
    assert [f.code for f in scan_text(text)][:1] == ["DDP514"]


# --- DDP204: gloo found no address of this host's own name ---------------------------------
GLOO_OWN_NAME = (  # msr-fiddle/pipedream#32: the host's name did not resolve to a local address
    "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:127] "
    "rp != nullptr. Unable to find address for: dgx-1.ai\n"
)
GLOO_INTERFACE = (  # NVIDIA/Megatron-LM#436: GLOO_SOCKET_IFNAME=bond1 on a host without it
    "RuntimeError: [enforce fail at /root/pytorch/third_party/gloo/gloo/transport/tcp/"
    "device.cc:83] ifa != nullptr. Unable to find address for: bond1\n"
)


def test_ddp204_live_and_from_a_log_is_one_function(monkeypatch) -> None:
    calls = spy_on(monkeypatch, interface_reach, "own_name_problem")
    assert "DDP204" in live_codes("multinode-loopback-as-is-node1")
    assert calls and calls[0][0].startswith("127.")  # the address the preflight predicts
    del calls[:]
    assert "DDP204" in live_codes("hostname-is-loopback")  # the host probe's own lookup
    assert calls
    del calls[:]
    findings = scan_text(GLOO_OWN_NAME)
    assert [f.code for f in findings] == ["DDP204"]
    assert findings[0].evidence["from_log_facts"]["host_name"] == "dgx-1.ai"
    assert calls == [(None,)]  # gloo found no address: the live rule's unusable name


def test_gloo_on_an_interface_stays_ddp205() -> None:
    findings = scan_text(GLOO_INTERFACE)
    assert [f.code for f in findings] == ["DDP205"]
    assert findings[0].evidence["interface"] == "bond1"


def test_a_retyped_gloo_line_about_a_host_name_is_ddp204_only() -> None:
    # the enforce condition cut off: the name decides (a dotted host name, not an interface)
    text = "RuntimeError: Unable to find address for: node-7.cluster.local\n"
    assert [f.code for f in scan_text(text)] == ["DDP204"]
    assert [f.code for f in scan_text("RuntimeError: Unable to find address for: ens5\n")] == [
        "DDP205"
    ]


def test_the_shared_ddp204_judgement() -> None:
    assert interface_reach.own_name_problem(None) == interface_reach.OWN_NAME_UNUSABLE
    assert interface_reach.own_name_problem("127.0.1.1") == interface_reach.OWN_NAME_LOOPBACK
    assert interface_reach.own_name_problem("::1") == interface_reach.OWN_NAME_LOOPBACK
    assert interface_reach.own_name_problem("10.0.0.5") is None
    subject = interface_reach.gloo_lookup_subject
    assert subject("rp", "eth0", None) == interface_reach.HOST_NAME  # gloo's own word decides
    assert subject("ifa", "dgx-1.ai", None) == interface_reach.INTERFACE
    assert subject(None, "dgx-1.ai", None) == interface_reach.HOST_NAME
    assert subject(None, "eth0.100", None) == interface_reach.INTERFACE  # a VLAN interface
    assert subject(None, "a.b", "a.b") == interface_reach.INTERFACE  # the variable lists it
