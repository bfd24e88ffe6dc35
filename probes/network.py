"""The network preflight of a multi-node run, on every node before its job starts.

The master is resolved; the interface that routes to it is found without sending anything
(a UDP socket's connect() only picks a route and a source address); this host's name is
resolved as gloo resolves it; and on every node but the master's, the master's port is
connected to until it answers or the bound passes, telling refused, timed out and no route
apart. The interface list is psutil's (Linux, macOS, Windows and the BSDs alike).
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddp_doctor.facts.cluster import Interface, NetworkFacts, NodePlan, PortCheck

RETRY_PAUSE_S = 0.5
DEFAULT_ROUTE_PROBE = "192.0.2.1"  # TEST-NET-1: only picks the default route, never reached
ATTEMPT_TIMEOUT_S = 3.0
# Names container runtimes and virtual networks give their interfaces.
KIND_PREFIXES = (
    ("docker", ("docker",)),
    ("veth", ("veth",)),
    ("bridge", ("br-", "virbr", "cni", "lxcbr")),
)
OUTCOMES = {
    errno.ECONNREFUSED: "refused",
    errno.ETIMEDOUT: "timed-out",
    errno.EHOSTUNREACH: "no-route",
    errno.ENETUNREACH: "unreachable",
}

Progress = Callable[[str], None]


def collect_network(
    plan: NodePlan,
    wait_s: float,
    progress: Progress | None = None,
    sys_net: Path = Path("/sys/class/net"),
) -> NetworkFacts:
    hostname = socket.gethostname()
    master_address, resolve_error = resolve_first(plan.master_addr)
    own_addresses, hostname_error = resolve_all(hostname)
    interfaces = tuple(list_interfaces(sys_net))
    is_local = master_address is not None and is_local_address(master_address)
    hosts_master = plan.hosts_master if plan.hosts_master is not None else is_local
    route = (None, None, None)
    if master_address is not None:
        route = towards_the_others(master_address, hosts_master, plan, interfaces)
    port = None
    if master_address is not None and not hosts_master:
        port = wait_for_port(master_address, plan.master_port, wait_s, progress)
    owner = next((i for i in interfaces if route[0] and route[0] in i.addresses), None)
    return NetworkFacts(
        master_addr=plan.master_addr,
        master_port=plan.master_port,
        master_address=master_address,
        resolve_error=resolve_error,
        master_is_local=is_local,
        hostname=hostname,
        hostname_addresses=tuple(own_addresses),
        hostname_error=hostname_error,
        route_address=route[0],
        route_interface=owner.name if owner else None,
        route_basis=route[1],
        route_error=route[2],
        interfaces=interfaces,
        port=port,
        node_addresses=resolve_hosts(plan.hosts) if hosts_master else {},
    )


def resolve_hosts(hosts: tuple[str, ...], bound_s: float = 10.0) -> dict[str, str]:
    """Each host's first address, while the bound lasts (a slow resolver costs no more)."""
    deadline = time.monotonic() + bound_s
    found = {}
    for host in hosts:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        addresses, _ = resolve_all(host, timeout_s=min(2.0, left))
        if addresses:
            found[host] = addresses[0]
    return found


def towards_the_others(
    master_address: str, hosts_master: bool, plan: NodePlan, interfaces: tuple[Interface, ...]
) -> tuple[str | None, str | None, str | None]:
    """(this node's address on the network the nodes share, how it was found, why not).

    Elsewhere it is the source of the route to the master. On the master's own node the master
    address may be loopback (its own name mapped to 127.0.1.1): then the route to another
    node the plan names, else the default route, else the only ordinary interface."""
    address, error = source_address_towards(master_address)
    if not hosts_master or (address and not _is_loopback(address)):
        return address, "route to the master", error
    for node, host in enumerate(plan.hosts):
        if node != plan.node_rank:
            peer, _ = resolve_first(host)
            found = source_address_towards(peer)[0] if peer else None
            if found and not _is_loopback(found):
                return found, f"route to node {node} ({host})", None
    found, _ = source_address_towards(DEFAULT_ROUTE_PROBE)
    if found and not _is_loopback(found):
        return found, "the default route", None
    ordinary = [
        i for i in interfaces if i.kind == "other" and any(":" not in a for a in i.addresses)
    ]
    if len(ordinary) == 1:
        first = next(a for a in ordinary[0].addresses if ":" not in a)
        return first, f"the only interface with an address ({ordinary[0].name})", None
    return None, None, "the master address is loopback here and no other route says which interface"


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def resolve_all(host: str, timeout_s: float = 5.0) -> tuple[list[str], str | None]:
    """Every address getaddrinfo gives, in its order; in a thread, so a stuck resolver cannot
    hold the doctor."""
    outcome: list[tuple[list[str], str | None]] = []

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            outcome.append((list(dict.fromkeys(str(info[4][0]) for info in infos)), None))
        except (OSError, UnicodeError) as error:
            outcome.append(([], f"{type(error).__name__}: {error}"))

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else ([], f"no answer from the resolver in {timeout_s:g} s")


def resolve_first(host: str) -> tuple[str | None, str | None]:
    addresses, error = resolve_all(host)
    return (addresses[0] if addresses else None), error


def source_address_towards(address: str) -> tuple[str | None, str | None]:
    """The local address the kernel would send from: connect() on a UDP socket sends nothing."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))
            return str(probe.getsockname()[0]), None
    except OSError as error:
        return None, f"{errno.errorcode.get(error.errno or 0, 'error')}: {error.strerror}"


def is_local_address(address: str) -> bool:
    """bind() succeeds only on an address of this machine."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
            return True
    except OSError:
        return False


def wait_for_port(
    address: str, port: int, bound_s: float, progress: Progress | None = None
) -> PortCheck:
    """TCP connects until one succeeds or `bound_s` passes; the last failure names why."""
    started = time.monotonic()
    attempts, outcome, last_error = 0, "error", None
    while True:
        attempts += 1
        left = bound_s - (time.monotonic() - started)
        try:
            with socket.create_connection(
                (address, port), timeout=max(0.2, min(ATTEMPT_TIMEOUT_S, left))
            ):
                return PortCheck("answered", attempts, round(time.monotonic() - started, 3))
        except OSError as error:
            outcome, last_error = classify(error)
        waited = time.monotonic() - started
        if progress:
            progress(
                f"network: waiting for the master {address}:{port} ({outcome}, {waited:.0f} s)"
            )
        if waited + RETRY_PAUSE_S >= bound_s:
            return PortCheck(outcome, attempts, round(waited, 3), last_error)
        time.sleep(RETRY_PAUSE_S)


def classify(error: OSError) -> tuple[str, str]:
    if isinstance(error, TimeoutError) and error.errno is None:
        return "timed-out", "connect timed out"
    name = errno.errorcode.get(error.errno or 0, "error")
    return OUTCOMES.get(error.errno or 0, "error"), f"{name}: {error.strerror or error}"


def list_interfaces(sys_net: Path = Path("/sys/class/net")) -> list[Interface]:
    """Every interface, in index order, with its IPv4 and IPv6 addresses (IPv4 first) and its
    kind; empty when the system will not list them."""
    import psutil

    try:
        stats = psutil.net_if_stats()
        listed = psutil.net_if_addrs()
    except OSError:
        return []
    addresses: dict[str, list[str]] = {}
    for label, entries in listed.items():
        found = addresses.setdefault(label.split(":")[0], [])  # an alias label eth0:1 is eth0
        found += [_plain(e.address) for e in entries if e.family == socket.AF_INET]
    for label, entries in listed.items():
        found = addresses[label.split(":")[0]]
        found += [_plain(e.address) for e in entries if e.family == socket.AF_INET6]
    for name in stats:  # an interface without any address is still there
        addresses.setdefault(name.split(":")[0], [])
    return [
        Interface(
            name,
            tuple(dict.fromkeys(found)),
            interface_kind(name, sys_net, _loopback(stats.get(name))),
        )
        for name, found in sorted(addresses.items(), key=lambda item: _index(item[0]))
    ]


def interface_kind(
    name: str, sys_net: Path = Path("/sys/class/net"), loopback: bool = False
) -> str:
    if loopback or name == "lo":
        return "loopback"
    for kind, prefixes in KIND_PREFIXES:
        if name.startswith(prefixes):
            return kind
    if (sys_net / name / "bridge").is_dir():
        return "bridge"
    return "other"


def _index(name: str) -> int:
    """The system's interface index: the order NCCL and `ip link` list interfaces in."""
    try:
        return socket.if_nametoindex(name)
    except (OSError, AttributeError):  # gone meanwhile, or no such call here
        return 1 << 31


def _plain(address: str) -> str:
    """Without the zone psutil appends to a link-local IPv6 address (fe80::1%eth0)."""
    return address.split("%", 1)[0]


def _loopback(stats: Any) -> bool:
    """psutil's flags ("up,loopback,running", psutil 5.9.3 on) where the system gives them."""
    return "loopback" in (getattr(stats, "flags", "") or "").split(",")
