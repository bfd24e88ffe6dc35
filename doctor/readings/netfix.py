"""Failures the network preflight predicts, and the variable that fixes each one.

gloo (torch's ProcessGroupGloo) binds to the first local address this host's name resolves
to, else to loopback, unless GLOO_SOCKET_IFNAME names interfaces; NCCL takes the interfaces
NCCL_SOCKET_IFNAME selects (prefixes, `=` exact, `^` exclude), else the first that is neither
loopback nor docker, InfiniBand first. Whatever they pick must be the interface that routes to
the master, or the other nodes cannot connect back. Each prediction names its finding's code
and the fix: the variable set to that interface. `run` applies the fixes to its job (unless
--as-is) and the findings say whether the fixed job passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ddp_doctor.facts.cluster import Interface, NetworkFacts
from ddp_doctor.readings import interface_reach
from ddp_doctor.readings.interface_reach import GLOO, NCCL


@dataclass(frozen=True)
class Prediction:
    code: str  # the finding that reports it: DDP204, DDP205, DDP212 or DDP215
    variable: str  # GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME
    fix_value: str  # the interface that routes to the master
    current: str | None  # the variable as the environment sets it; None: unset
    picked: str | None  # what gloo / NCCL would use instead (an address or interfaces)


def predict(
    network: NetworkFacts, variables: Mapping[str, str], with_nccl: bool
) -> list[Prediction]:
    route = network.route_interface
    if route is None:
        return []  # nothing to fix towards: the master is not reachable at all (DDP211)
    predictions = [_gloo(network, variables.get(GLOO), route)]
    if with_nccl:
        predictions.append(_nccl(network, variables.get(NCCL), route))
    return [p for p in predictions if p is not None]


def nccl_possible(gpus: int, backend: str | None) -> bool:
    """NCCL can be the job's backend: GPUs are visible and gloo was not asked for."""
    return gpus > 0 and backend != "gloo"


def fixes(predictions: list[Prediction]) -> dict[str, str]:
    return {p.variable: p.fix_value for p in predictions}


def _gloo(network: NetworkFacts, current: str | None, route: str) -> Prediction | None:
    if current:
        names = [name.strip() for name in current.split(",") if name.strip()]
        if route in names and all(network.interface(name) for name in names):
            return None
        return Prediction("DDP205", GLOO, route, current, ", ".join(names))
    picked = gloo_default_address(network)
    if interface_reach.own_name_problem(picked) is not None:
        return Prediction("DDP204", GLOO, route, None, picked)
    owner = network.interface_of(picked)
    if owner is not None and owner.name != route:
        return Prediction("DDP212", GLOO, route, None, picked)
    return None


def gloo_default_address(network: NetworkFacts) -> str | None:
    """The first address of this host's name that is this machine's (gloo binds there)."""
    local = {address for interface in network.interfaces for address in interface.addresses}
    for address in network.hostname_addresses:
        if address in local or _is_loopback(address):
            return address
    return None


def _nccl(network: NetworkFacts, current: str | None, route: str) -> Prediction | None:
    if current:
        chosen = nccl_selected(current, network.interfaces)
        if route in chosen:
            return None
        return Prediction(
            "DDP205", NCCL, _exact_if_ambiguous(route, network), current, ", ".join(chosen)
        )
    candidates = nccl_default_candidates(network.interfaces)
    first = [network.interface(name) or Interface(name) for name in candidates[:1]]
    if interface_reach.nccl_choice_unreachable(first, route, other_hosts=True):
        return Prediction("DDP215", NCCL, _exact_if_ambiguous(route, network), None, candidates[0])
    return None


def nccl_selected(spec: str, interfaces: tuple[Interface, ...]) -> list[str]:
    """The interfaces an NCCL_SOCKET_IFNAME value selects."""
    exclude = spec.startswith("^")
    text = spec[1:] if exclude else spec
    exact = text.startswith("=")
    prefixes = [p for p in text.lstrip("=").split(",") if p]

    def matches(name: str) -> bool:
        return any(name == p if exact else name.startswith(p) for p in prefixes)

    return [i.name for i in interfaces if matches(i.name) != exclude]


def nccl_default_candidates(interfaces: tuple[Interface, ...]) -> list[str]:
    usable = [
        i.name
        for i in interfaces
        if i.kind != "loopback" and not i.name.startswith("docker") and _has_ipv4(i)
    ]
    return [n for n in usable if n.startswith("ib")] + [n for n in usable if not n.startswith("ib")]


def _exact_if_ambiguous(route: str, network: NetworkFacts) -> str:
    """NCCL reads a prefix: `eth1` would also take eth10, so name it exactly (`=eth1`)."""
    others = [i.name for i in network.interfaces if i.name != route and i.name.startswith(route)]
    return f"={route}" if others else route


def _has_ipv4(interface: Interface) -> bool:
    return any(":" not in address for address in interface.addresses)


def _is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"
