"""Issue 21, fourth logs session: families tuned on corpus E's tune half. Each text is the form
its source printed (named beside it); each test also pins the silent neighbour of its rule."""

from __future__ import annotations

import pytest
from log_scans import by_code, codes

from ddp_doctor import registry
from ddp_doctor.logscan import scan_text

# meta-pytorch/monarch#1571: a GCP host name its DNS cannot resolve
IPV6_LOOKUP = (
    "[W1008 23:40:22.781961348 socket.cpp:767] [c10d] The IPv6 network addresses of ({host}, "
    "50745) cannot be retrieved (gai error: -2 - Name or service not known).\n"
)
CONNECT = (
    "[W1008 23:40:22.836678340 socket.cpp:767] [c10d] The client socket has failed to connect "
    "to [{host}]:50745 (errno: {errno}).\n"
)
GCP = "job-01k72wn5f8waqw7d81mfggagn4.internal"
# pytorch/pytorch#52916: node 1 of two with NCCL_SOCKET_IFNAME=lo
IFNAME_LO = (
    "GPU9:10330:10330 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo\n"
    "GPU9:10330:10330 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>\n"
    "GPU9:10330:10330 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
)
REFUSED = "GPU9:10330:10399 [0] NCCL INFO Call to connect returned Connection refused, retrying\n"
# NVIDIA/flowtron#52 (THC, torch 1.x)
KERNEL_ASSERT = (
    "C:/cb/pytorch_1000000000000/work/aten/src/THC/THCTensorIndex.cu:218: block: [0,0,0], "
    "thread: [106,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
)
# YijinHuang/SSiT#19: the source line Python prints under torch's incompatible-device warning
INCOMPATIBLE = (
    '  warnings.warn(incompatible_device_warn.format(device_name, capability, " ".join('
    "arch_list), device_name))\n"
)


# --- DDP203: an IPv6-only lookup counts when a connect to that name found no address ------------
def test_an_ipv6_lookup_failure_with_a_connect_that_found_no_address_is_ddp203() -> None:
    text = CONNECT.format(host=GCP, errno="22 - Invalid argument") + IPV6_LOOKUP.format(host=GCP)
    found = by_code(text)["DDP203"]
    assert found.evidence["from_log_facts"]["host"] == GCP
    assert found.evidence["line"] == 2


def test_the_shared_ddp203_rule_judges_it(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = registry.spec_for("DDP203")
    calls: list = []

    def spy(facts):
        calls.append(facts)
        return spec.check(facts)

    import dataclasses

    monkeypatch.setitem(registry.RULES, "DDP203", dataclasses.replace(spec, check=spy))
    scan_text(
        CONNECT.format(host=GCP, errno="22 - Invalid argument") + IPV6_LOOKUP.format(host=GCP)
    )
    assert calls and calls[0].job.preflight.master_addr == GCP


@pytest.mark.parametrize(
    ("host", "errno"),
    [
        (GCP, "111 - Connection refused"),  # the name resolved (IPv4): something refused
        ("localhost", "22 - Invalid argument"),  # localhost without ::1 (antgroup/animate-x#15)
        ("gpu-box.local", "22 - Invalid argument"),
    ],
)
def test_an_ipv6_lookup_failure_otherwise_stays_silent(host: str, errno: str) -> None:
    text = IPV6_LOOKUP.format(host=host) + CONNECT.format(host=host, errno=errno)
    assert "DDP203" not in codes(text)


def test_an_ipv6_lookup_failure_alone_stays_silent() -> None:
    assert "DDP203" not in codes(IPV6_LOOKUP.format(host=GCP) * 3)


# --- DDP205: NCCL_SOCKET_IFNAME that leaves NCCL only loopback --------------------------------
def test_ifname_lo_with_failing_connects_is_ddp205_not_ddp215() -> None:
    found = codes(IFNAME_LO + REFUSED * 3)
    assert found[0] == "DDP205" and "DDP215" not in found
    assert by_code(IFNAME_LO + REFUSED)["DDP205"].evidence["from_log_facts"]["interfaces"] == ["lo"]


def test_ifname_lo_in_a_two_node_launch_is_ddp205() -> None:
    launch = "python -m torch.distributed.launch --nnode=2 --node_rank=1 --master_addr 10.0.0.1\n"
    assert codes(launch + IFNAME_LO)[0] == "DDP205"


def test_ifname_lo_on_one_host_that_works_is_silent() -> None:
    assert codes(IFNAME_LO) == []


# --- DDP506 and DDP004: the kernel's own line, the warning's source line -------------------------
def test_the_kernels_assertion_line_alone_is_ddp506_naming_the_assertion() -> None:
    found = by_code(KERNEL_ASSERT * 4)["DDP506"]
    assert found.evidence["assertion"] == "srcIndex < srcSelectDimSize"
    assert found.evidence["count"] == 4


def test_a_python_assertion_is_no_kernel_assertion() -> None:
    text = "    assert x.shape == y.shape\nAssertionError: Assertion `x` failed in my check\n"
    assert "DDP506" not in codes(text)


def test_the_incompatible_device_warnings_source_line_is_ddp004() -> None:
    assert codes(INCOMPATIBLE) == ["DDP004"]


# --- DDP513 after a collective timeout is the timeout's consequence ----------------------------
# snowflakedb/ArcticTraining#219: rank 7's stuck watchdog printed before rank 2's earlier timeout
STUCK = (
    "[rank7]:[E626 05:14:36.393067540 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 7] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
    "monitoring enqueued collectives.\n"
)
TIMEOUT = (
    "[rank2]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=120049, OpType=_ALLGATHER_BASE, "
    "NumelIn=16384000, NumelOut=131072000, Timeout(ms)=1800000) ran for 1800065 milliseconds "
    "before timing out.\n"
)


def test_a_stuck_watchdog_with_a_collective_timeout_comes_after_it() -> None:
    assert codes(STUCK + TIMEOUT)[:2] == ["DDP302", "DDP513"]


def test_a_stuck_watchdog_alone_is_ddp513() -> None:
    assert codes(STUCK) == ["DDP513"]


def test_a_crash_before_both_stays_first() -> None:
    crash = "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert codes(crash + STUCK + TIMEOUT)[0] == "DDP512"


# --- DDP204 from a pasted hosts lookup --------------------------------------------------------
# ray-project/ray#24305: gloo refused at loopback; `getent hosts` shows the head's name on it
GLOO_REFUSED = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
    "[127.0.0.1]:14221: Connection refused\n"
)
GETENT = "#0 machine(head: ) getent hosts `hostname`\n127.0.0.1       PC103686\n"


def test_a_pasted_lookup_of_the_host_name_on_loopback_with_a_refused_connect_is_ddp204() -> None:
    found = scan_text(GLOO_REFUSED + GETENT)
    assert found[0].code == "DDP204"
    assert "PC103686" in found[0].message


@pytest.mark.parametrize(
    "text",
    [
        GETENT,  # the lookup alone: nothing failed
        GLOO_REFUSED + "$ getent hosts localhost\n127.0.0.1       localhost\n",
        GLOO_REFUSED + "127.0.0.1       PC103686\n",  # not the answer to a pasted lookup
    ],
)
def test_otherwise_no_ddp204_from_hosts_lines(text: str) -> None:
    assert "DDP204" not in codes(text)


# --- torchrun 1.x prints the death signal as a number -------------------------------------------
@pytest.mark.parametrize(
    ("number", "name"),
    [("15", "SIGTERM"), ("2", "SIGINT")],  # determined-ai/determined#8915, MCG-NJU/RTD-Action#31
)
def test_a_numbered_death_signal_is_named(number: str, name: str) -> None:
    text = (
        "WARNING:torch.distributed.elastic.agent.server.api:Received "
        f"{number} death signal, shutting down workers\n"
    )
    assert by_code(text)["DDP507"].evidence["signal"] == name
