"""Whether the interfaces NCCL or gloo use can carry a run across hosts: pure judgements over
the interfaces seen, the one place both the live preflight and `logs` decide DDP205 and DDP215,
and DDP204's judgement of the address gloo binds for this host's own name.

Each function takes only what both sources can know: the interfaces (the host's own list and
the route to the master live; in a log, the interfaces NCCL reported using), the variable's
value as set, and whether the run reaches other hosts. The caller passes what it saw; where a
source cannot know a fact (a log never shows the route to the master) it passes None.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddp_doctor.facts.cluster import Interface

GLOO, NCCL = "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"
UNROUTABLE_KINDS = ("loopback", "docker", "veth", "bridge")
VIRTUAL_PREFIXES = ("docker", "veth", "virbr", "br-", "cni", "flannel")
OWN_NAME_UNUSABLE = "no-local-address"  # this host's name gives gloo no address of its own
OWN_NAME_LOOPBACK = "loopback"  # it gives a loopback address: other hosts cannot reach it
INTERFACE, HOST_NAME = "interface", "host-name"  # what gloo's "Unable to find address for" names
NO_MATCH = "matches-none"  # the variable selects none of the interfaces seen
ONLY_UNROUTABLE = "only-unroutable"  # it leaves only interfaces other hosts cannot reach


def link_local(address: str) -> bool:
    return address.lower().startswith("fe80:")


def unroutable(interface: Interface) -> bool:
    """Loopback, a container runtime's or virtual network's interface, or an IPv6 link-local
    address: no other host can reach it."""
    name = interface.name
    virtual = name == "lo" or name.startswith(VIRTUAL_PREFIXES)
    return (
        interface.kind in UNROUTABLE_KINDS
        or virtual
        or any(link_local(address) for address in interface.addresses)
    )


def nccl_choice_unreachable(
    chosen: Sequence[Interface], route_interface: str | None, other_hosts: bool
) -> list[Interface]:
    """DDP215: of the interfaces NCCL chose by itself (NCCL_SOCKET_IFNAME unset), those the
    other nodes cannot reach it over. With the route to the master known (the live preflight)
    that is every one but the route's interface; without it (a log) every unroutable one, when
    the run reaches other hosts (on one host loopback works)."""
    if route_interface is not None:
        return [i for i in chosen if i.name != route_interface.lstrip("=")]
    return [i for i in chosen if unroutable(i)] if other_hosts else []


def socket_ifname_problem(
    variable: str, value: str, interfaces: Sequence[Interface], other_hosts: bool
) -> str | None:
    """DDP205: why the interfaces `value` selects among `interfaces` cannot carry the run, or
    None. NO_MATCH: it selects none of them (NCCL reads prefixes, `^` to exclude and `=` for
    exact names; gloo needs every name it lists); ONLY_UNROUTABLE: the run reaches other
    hosts and it leaves only interfaces they cannot reach."""
    names = [i.name for i in interfaces]
    if not selects_any(variable, value, names):
        return NO_MATCH
    selected = [i for i in interfaces if _selects(variable, value, i.name)]
    if other_hosts and selected and all(unroutable(i) for i in selected):
        return ONLY_UNROUTABLE
    return None


def selects_any(variable: str, value: str, names: Sequence[str]) -> bool:
    """The variable selects an interface NCCL or gloo can use (gloo: all it lists exist)."""
    if variable == GLOO:
        return all(name.strip() in names for name in value.split(",") if name.strip())
    return any(_selects(variable, value, name) for name in names)


def _selects(variable: str, value: str, name: str) -> bool:
    if variable == GLOO:
        return name in [part.strip() for part in value.split(",")]
    if value.startswith("^"):  # an exclusion list
        return not any(name.startswith(p.lstrip("=")) for p in value[1:].split(",") if p)
    exact = value.startswith("=")
    wanted = [p for p in value.lstrip("=").split(",") if p]
    return any(name == p if exact else name.startswith(p) for p in wanted)


def own_name_problem(bound_address: str | None) -> str | None:
    """DDP204: what is wrong with the address gloo binds for this host's own name (with
    GLOO_SOCKET_IFNAME unset gloo resolves gethostname() and binds the first local address it
    gets). None given: the name resolves to no address of this host (it does not resolve, or
    only to other machines' addresses), OWN_NAME_UNUSABLE; a loopback address,
    OWN_NAME_LOOPBACK; else None. The live preflight passes the address it predicts gloo binds;
    a log, None where gloo said it found none."""
    if bound_address is None:
        return OWN_NAME_UNUSABLE
    if bound_address.startswith("127.") or bound_address == "::1":
        return OWN_NAME_LOOPBACK
    return None


def gloo_lookup_subject(condition: str | None, name: str, gloo_ifname: str | None) -> str:
    """What gloo's "Unable to find address for: NAME" is about. gloo's tcp/device.cc raises it
    from two lookups, and its enforce condition says which: `ifa != nullptr` after searching
    the interfaces for GLOO_SOCKET_IFNAME's (INTERFACE), `rp != nullptr` after binding the
    addresses a host name resolved to, this host's own name unless the caller gave another
    (HOST_NAME). Without the condition (a wrapped or retyped line): a name GLOO_SOCKET_IFNAME
    lists is an interface; a dotted name with a letter after a dot is a host name (interface
    names carry dots only before a VLAN number, eth0.100); anything else an interface."""
    if condition in ("ifa", "rp"):
        return INTERFACE if condition == "ifa" else HOST_NAME
    listed = [part.strip() for part in (gloo_ifname or "").split(",")]
    if name in listed:
        return INTERFACE
    labels = name.split(".")
    dotted = len(labels) > 1 and any(label[:1].isalpha() for label in labels[1:])
    return HOST_NAME if dotted else INTERFACE
