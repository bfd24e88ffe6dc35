"""DDP209-DDP210: a network on which the ranks cannot reach each other at all."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule

# What connect() says without a route, as torch, gloo and NCCL print it (errno 101 and 113).
UNREACHABLE_TEXTS = ("Network is unreachable", "No route to host")


def no_interface_up(facts: FactSet) -> bool:
    host = facts.host
    return host is not None and host.interfaces_up is not None and not host.interfaces_up


@rule(
    "DDP209",
    Remediation(
        "Bring an interface up: loopback at least for one node (`ip link set lo up`), and the "
        "interface that links the nodes for several. In a container or network namespace, "
        "give it a network (docker's default bridge, or `--network host`).",
        ("ip -br link", "ip link set lo up"),
    ),
)
def interface_down(facts: FactSet) -> Iterator[Hit]:
    """What it finds: no network interface of this host has its UP flag set, not even
    loopback.
    Why it matters: every rank, even on one machine, talks to the others over TCP (the
    store, gloo, NCCL's bootstrap): nothing can connect, and torchrun fails with "Network is
    unreachable" (errno 101) or the ranks wait until their timeouts.
    Example: a fresh network namespace (`ip netns add`, `unshare -n`) or a container started
    with `--network none`, where loopback is down.
    Fix: bring loopback (and the inter-node interface) up, or give the container a network.
    """
    if no_interface_up(facts):
        interfaces = list(facts.host.interfaces) if facts.host else []
        listed = ", ".join(interfaces) or "none"
        yield Hit(
            f"no network interface is up (interfaces: {listed}); ranks cannot connect at all",
            {"interfaces": interfaces, "interfaces_up": []},
        )


@rule(
    "DDP210",
    Remediation(
        "Give this host a route to the master address: check the address (--master-addr / "
        "MASTER_ADDR), the interface it needs (`ip route get ADDRESS`), and the routes "
        "(`ip route`).",
        ("ip route", "ip -br addr"),
    ),
)
def network_unreachable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the kernel has no route to the master address (a route lookup before
    launch answers ENETUNREACH or EHOSTUNREACH), or the job's output says "Network is
    unreachable" / "No route to host".
    Why it matters: the store and the backends connect to that address; without a route the
    rendezvous fails at once or retries until its timeout, with a message about sockets
    rather than about the route.
    Example: MASTER_ADDR on a subnet this node has no interface in; a namespace whose only
    interface has no address.
    Fix: an address this host can route to, or the missing interface or route.
    """
    if no_interface_up(facts):
        return  # DDP209 names the cause
    job = facts.job
    if job is None:
        return
    if job.preflight.route_error:
        yield Hit(
            f"no route to the master address {job.preflight.master_addr!r}: "
            f"{job.preflight.route_error}",
            {"address": job.preflight.master_addr, "error": job.preflight.route_error},
        )
        return
    line = _unreachable_line(job)
    if line is not None:
        yield Hit(
            f"the job could not connect: {line[:300]}",
            {"address": job.preflight.master_addr, "evidence": line[:300]},
        )


def _unreachable_line(job: JobFacts) -> str | None:
    errors = [record.error for rank in job.ranks for record in rank.stages if record.error]
    for text in (*errors, job.output_tail):
        for line in text.splitlines():
            if any(marker in line for marker in UNREACHABLE_TEXTS):
                return line.strip()
    return None
