"""The network preflight: the failures it predicts and their fixes (netfix.py), and the
measurements behind them (probes/network.py)."""

from __future__ import annotations

import errno
import socket
import time
from pathlib import Path

import pytest

from ddp_doctor.facts.cluster import Interface, NetworkFacts, NodePlan
from ddp_doctor.probes import network
from ddp_doctor.probes.job.rendezvous import Rendezvous, rendezvous_args
from ddp_doctor.readings.netfix import (
    fixes,
    gloo_default_address,
    nccl_default_candidates,
    nccl_selected,
    predict,
)

LO = Interface("lo", ("127.0.0.1", "::1"), "loopback")
ETH1 = Interface("eth1", ("10.200.0.2",), "other")
DOCKER = Interface("docker0", ("172.17.0.1",), "docker")
IB = Interface("ib0", ("10.10.0.2",), "other")


def node(hostname_addresses: tuple[str, ...] = ("10.200.0.2",), **changes: object) -> NetworkFacts:
    facts = dict(
        master_addr="node0",
        master_port=29500,
        master_address="10.200.0.1",
        hostname="node1",
        hostname_addresses=hostname_addresses,
        route_address="10.200.0.2",
        route_interface="eth1",
        interfaces=(LO, DOCKER, ETH1),
    )
    return NetworkFacts(**{**facts, **changes})  # type: ignore[arg-type]


def codes(facts: NetworkFacts, variables: dict[str, str] | None = None, nccl: bool = False) -> list:
    return [(p.code, p.variable, p.fix_value) for p in predict(facts, variables or {}, nccl)]


def test_a_healthy_node_predicts_nothing() -> None:
    assert codes(node()) == []
    assert codes(node(), nccl=True) == []


@pytest.mark.parametrize("addresses", [("127.0.1.1",), ()])
def test_a_host_name_on_loopback_or_unresolved_is_fixed_with_gloo_socket_ifname(
    addresses: tuple[str, ...],
) -> None:
    (prediction,) = predict(node(addresses), {}, False)
    assert (prediction.code, prediction.variable, prediction.fix_value) == (
        "DDP204",
        "GLOO_SOCKET_IFNAME",
        "eth1",
    )
    assert fixes([prediction]) == {"GLOO_SOCKET_IFNAME": "eth1"}


def test_a_host_name_on_the_docker_bridge() -> None:
    assert codes(node(("172.17.0.1",))) == [("DDP212", "GLOO_SOCKET_IFNAME", "eth1")]
    assert gloo_default_address(node(("192.0.2.9", "10.200.0.2"))) == "10.200.0.2"


@pytest.mark.parametrize(
    ("value", "predicted"),
    [("eth9", True), ("docker0", True), ("eth1", False), ("eth1,eth9", True), ("eth1,lo", False)],
)
def test_gloo_socket_ifname_must_exist_and_include_the_route(value: str, predicted: bool) -> None:
    found = codes(node(), {"GLOO_SOCKET_IFNAME": value})
    assert found == ([("DDP205", "GLOO_SOCKET_IFNAME", "eth1")] if predicted else [])


@pytest.mark.parametrize(
    ("value", "selected"),
    [
        ("eth", ["eth1"]),
        ("=eth", []),
        ("^docker,lo", ["eth1"]),
        ("^eth", ["lo", "docker0"]),
        ("docker,eth", ["docker0", "eth1"]),
    ],
)
def test_nccl_socket_ifname_as_nccl_reads_it(value: str, selected: list[str]) -> None:
    assert nccl_selected(value, (LO, DOCKER, ETH1)) == selected


def test_nccl_is_checked_only_where_it_can_run() -> None:
    assert codes(node(), {"NCCL_SOCKET_IFNAME": "ib"}) == []
    assert codes(node(), {"NCCL_SOCKET_IFNAME": "ib"}, nccl=True) == [
        ("DDP205", "NCCL_SOCKET_IFNAME", "eth1")
    ]


def test_nccl_default_pick_prefers_infiniband_and_skips_docker() -> None:
    assert nccl_default_candidates((LO, DOCKER, ETH1, IB)) == ["ib0", "eth1"]
    assert codes(node(interfaces=(LO, DOCKER, ETH1, IB)), nccl=True) == [
        ("DDP215", "NCCL_SOCKET_IFNAME", "eth1")
    ]
    assert codes(node(interfaces=(LO, DOCKER, ETH1)), nccl=True) == []


def test_an_nccl_fix_is_exact_where_a_prefix_would_take_more() -> None:
    eth10 = Interface("eth10", ("10.9.0.1",), "other")
    facts = node(interfaces=(LO, eth10, ETH1))
    assert codes(facts, nccl=True) == [("DDP215", "NCCL_SOCKET_IFNAME", "=eth1")]


def test_no_route_no_fix() -> None:
    assert predict(node(("127.0.1.1",), route_interface=None), {}, True) == []


# --- measurements ----------------------------------------------------------------------------
def test_interfaces_are_listed_with_their_addresses() -> None:
    found = {i.name: i for i in network.list_interfaces()}
    assert "127.0.0.1" in found["lo"].addresses and found["lo"].kind == "loopback"


@pytest.mark.parametrize(
    ("name", "kind"),
    [("docker0", "docker"), ("veth1a2b", "veth"), ("br-5f2c", "bridge"), ("virbr0", "bridge")],
)
def test_interface_kinds_by_name(name: str, kind: str, tmp_path: Path) -> None:
    assert network.interface_kind(name, tmp_path) == kind


def test_a_linux_bridge_is_found_in_sysfs(tmp_path: Path) -> None:
    (tmp_path / "lan0" / "bridge").mkdir(parents=True)
    assert network.interface_kind("lan0", tmp_path) == "bridge"
    assert network.interface_kind("eth7", tmp_path) == "other"


def test_the_source_address_towards_a_local_address_is_local() -> None:
    assert network.source_address_towards("127.0.0.1") == ("127.0.0.1", None)
    assert network.is_local_address("127.0.0.1")
    assert not network.is_local_address("192.0.2.77")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "refused"),
        (TimeoutError("timed out"), "timed-out"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "no-route"),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), "unreachable"),
        (OSError(errno.EACCES, "Permission denied"), "error"),
    ],
)
def test_connect_failures_are_told_apart(error: OSError, outcome: str) -> None:
    assert network.classify(error)[0] == outcome


def test_a_listening_port_answers_at_once() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        check = network.wait_for_port("127.0.0.1", listener.getsockname()[1], 5)
    assert (check.outcome, check.attempts) == ("answered", 1)


@pytest.mark.slow
def test_a_closed_port_is_retried_until_the_bound() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))  # bound, never listening: refused
        port = holder.getsockname()[1]
        started = time.monotonic()
        lines: list[str] = []
        check = network.wait_for_port("127.0.0.1", port, 1.5, lines.append)
    assert check.outcome == "refused" and check.attempts >= 2
    assert 1.0 <= time.monotonic() - started < 4
    assert lines and "refused" in lines[-1]


def test_the_master_node_falls_back_to_its_only_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own name (the master address) on 127.0.1.1, no default route: the only ordinary
    interface is the one the others reach it through."""
    monkeypatch.setattr(network, "source_address_towards", lambda address: ("127.0.1.1", None))
    plan = NodePlan(2, 2, "static", "node0", 29500, node_rank=0)
    assert network.towards_the_others("127.0.1.1", True, plan, (LO, ETH1))[:2] == (
        "10.200.0.2",
        "the only interface with an address (eth1)",
    )
    assert network.towards_the_others("127.0.1.1", True, plan, (LO, ETH1, IB))[0] is None


def test_rendezvous_flags() -> None:
    static = Rendezvous("static", 2, 2, "node0", 29500, "r", 20, node_rank=1)
    assert rendezvous_args(static)[:4] == ["--nnodes", "2", "--node-rank", "1"]
    assert "timeout=20" in rendezvous_args(static)
    c10d = Rendezvous("c10d", 4, 2, "fd00::1", 29400, "r", 30, is_host=True, local_addr="fd00::1")
    argv = rendezvous_args(c10d)
    assert argv[argv.index("--rdzv-endpoint") + 1] == "[fd00::1]:29400"
    assert argv[argv.index("--nnodes") + 1] == "2:4"
    conf = argv[argv.index("--rdzv-conf") + 1]
    assert "is_host=1" in conf and "join_timeout=30" in conf
    assert argv[-2:] == ["--local-addr", "fd00::1"]
