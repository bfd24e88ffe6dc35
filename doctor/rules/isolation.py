"""DDP219-DDP220, DDP222: what `run --isolate`'s pair rounds found: the bad nodes, named with
why and an exclude list for the scheduler, what the rounds could not settle, and pairs far
under the band their nodes' links state (which the median cannot see when every pair is
slow)."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.readings.isolation import exclude_forms, hosts_of, pair_failure, why_bad
from ddp_doctor.registry import Hit, rule


@rule(
    "DDP219",
    Remediation(
        "Leave the named nodes out of the job and have them checked (cables, NIC, switch port, "
        "firewall, GPU); the fix's commands give the exclude list for srun, a hostfile without "
        "them for deepspeed or mpirun, and a taint for Kubernetes."
    ),
)
def bad_nodes_isolated(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with `run --isolate`, nodes that failed a pair test beside a node that
    passed its own: no connection in time, an all-reduce whose sum is not exact, or a
    point-to-point bandwidth under half the median of the pairs (pairs far under their links'
    stated band are DDP222's).
    Why it matters: one bad node makes a whole multi-node job hang or crawl, and the symptom
    (a timeout, a slow step) names no node; finding it by hand takes pair after pair.
    Example: 1,024 nodes where node 17's link runs at 20 Mbit/s and node 203 drops the
    store's port: `--exclude=node[17,203]`.
    Fix: exclude the named nodes and repair them.
    """
    cluster = facts.cluster
    isolation = cluster.isolation if cluster else None
    if cluster is None or isolation is None or not isolation.bad:
        return
    names = {node.node_rank: node.host for node in cluster.nodes}
    hosts = hosts_of(isolation.bad, names)
    reasons = "; ".join(
        f"node {node} ({host}): {why_bad(node, isolation)}"
        for node, host in zip(isolation.bad, hosts, strict=True)
    )
    forms = exclude_forms(hosts)
    yield Hit(
        f"{len(hosts)} bad node(s) in {isolation.rounds} rounds of pair tests: {reasons}",
        {"nodes": list(isolation.bad), "hosts": hosts, **forms},
        fix=Remediation(
            f"Leave {', '.join(hosts)} out: srun {forms['srun']}; a hostfile without them "
            "for deepspeed or mpirun; a taint for Kubernetes.",
            (f"srun {forms['srun']} ...", forms["hostfile"], forms["kubernetes"]),
        ),
    )


@rule(
    "DDP220",
    Remediation(
        "Rerun with --isolate and a longer --timeout, or test the named nodes against each "
        "other by hand; a pair that fails while both nodes pass elsewhere points at the path "
        "between them (a switch, a route, a firewall rule)."
    ),
)
def nodes_unsettled(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with `run --isolate`, suspects that the rounds ran out before settling
    (no node known good to pair them with), and pairs that could not connect or summed wrong
    although both nodes then passed beside others. A pair that was only slow, once, while
    both its nodes passed beside others is taken for a moment's load, not a path: the rounds
    retest slowness before they name a node.
    Why it matters: the exclude list of DDP219 does not cover them; the job may still fail on
    them or on the path between two good nodes.
    Example: every node in a rack fails with every other (a rack switch down).
    Fix: test them again, or the path between the named pair.
    """
    cluster = facts.cluster
    isolation = cluster.isolation if cluster else None
    if isolation is None:
        return
    if isolation.unsettled:
        yield Hit(
            f"pair tests left node(s) {', '.join(map(str, isolation.unsettled))} unsettled "
            f"after {isolation.rounds} rounds",
            {"nodes": list(isolation.unsettled)},
        )
    flagged = set(isolation.bad) | set(isolation.unsettled)
    for pair in isolation.pairs:
        reason = pair_failure(pair, isolation)
        hard = not pair.connected or pair.exact is False
        if reason and hard and not flagged & set(pair.nodes):
            yield Hit(
                f"nodes {pair.nodes[0]} and {pair.nodes[1]} failed together ({reason}) but "
                "each passed beside other nodes: the path between them",
                {"nodes": list(pair.nodes), "reason": reason},
            )


@rule(
    "DDP222",
    Remediation(
        "Check the named nodes' links: `ethtool IFACE` (speed, duplex), error counters "
        "(`ip -s link`, `ethtool -S`), MTU along the path, the switch ports, and that "
        "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME / NCCL_IB_HCA name the fast interface."
    ),
)
def pairs_under_link_band(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with `run --isolate`, pairs whose point-to-point bandwidth is far under
    the band their nodes' links state (the slower node's /sys/class/net speed of the route
    interface, or its fastest active IB/RoCE port when the pairs ran NCCL): under 2% of it
    over sockets, under 10% over the fabric. Pairs of nodes already named bad are left to
    DDP219.
    Why it matters: the median of the pairs cannot see a cluster where every pair is slow
    alike (a wrong interface, a congested or mis-set switch): every pair passes against it.
    Example: four nodes on 100 Gbit/s interfaces whose pairs all run at 0.02 GB/s.
    Fix: check the links (speed, errors, MTU, switch) and the *_SOCKET_IFNAME variables.
    """
    cluster = facts.cluster
    isolation = cluster.isolation if cluster else None
    if isolation is None or not isolation.under_band or isolation.band_floor is None:
        return
    bad = set(isolation.bad)
    under = [p for p in isolation.under_band if not bad & set(p)]
    if not under:
        return
    bands = {band.nodes: band for band in isolation.bands}
    speeds = {p.nodes: p.gbps for p in isolation.pairs if p.nodes in bands}
    shown = "; ".join(
        f"nodes {a}-{b}: {speeds.get((a, b)) or 0:.3g} GB/s of {bands[(a, b)].gbps:.3g} GB/s "
        f"({bands[(a, b)].basis})"
        for a, b in under[:8]
        if (a, b) in bands
    )
    more = f" and {len(under) - 8} more" if len(under) > 8 else ""
    nodes = sorted({node for pair in under for node in pair})
    yield Hit(
        f"{len(under)} of {isolation.banded_pairs} pairs ran under "
        f"{100 * isolation.band_floor:g}% of their links' stated band: {shown}{more}",
        {
            "pairs": [list(p) for p in under],
            "nodes": nodes,
            "floor": isolation.band_floor,
            "median_gbps": isolation.median_gbps,
        },
    )
