"""DDP219-DDP220: what `run --isolate`'s pair rounds found: the bad nodes, named with why and
an exclude list for the scheduler, and what the rounds could not settle."""

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
    point-to-point bandwidth under half the median of all pairs (or of the topology's
    expected band between nodes, where known).
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
    (no node known good to pair them with), and pairs that failed although both nodes then
    passed beside others.
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
        if reason and not flagged & set(pair.nodes):
            yield Hit(
                f"nodes {pair.nodes[0]} and {pair.nodes[1]} failed together ({reason}) but "
                "each passed beside other nodes: the path between them",
                {"nodes": list(pair.nodes), "reason": reason},
            )
