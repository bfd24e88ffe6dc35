"""Readings of a multi-node run that the rendezvous rules share: which nodes never arrived,
and which node a rank belongs to."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ddp_doctor.facts.cluster import C10D, STATIC
from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.rules.jobreading import job_failed

# torchrun's static store on node 0, when the others do not all come:
#   DistStoreError: Timed out after 21 seconds waiting for clients. 1/2 clients joined.
CLIENTS_JOINED = re.compile(r"(\d+)/(\d+) clients joined")


@dataclass(frozen=True)
class MissingNodes:
    """Nodes that never reached this node's rendezvous."""

    count: int | None  # None: not known how many
    candidates: tuple[int, ...]  # node ranks; exactly the missing ones when `exact`
    exact: bool
    joined: int | None = None  # nodes that did arrive, as torchrun counted them
    arrived_from: tuple[str, ...] = ()  # c10d: addresses of the nodes that did arrive


def rendezvous_never_completed(job: JobFacts) -> bool:
    """torchrun ran and failed (or was stopped) before it started any rank of this node."""
    return job.launched and job_failed(job) and not any(rank.stages for rank in job.ranks)


def missing_nodes(facts: FactSet) -> MissingNodes | None:
    nodes, job = facts.plan.nodes, facts.job
    if nodes is None or job is None or not rendezvous_never_completed(job):
        return None
    if nodes.rendezvous == C10D:
        return _missing_in_c10d(facts)
    others = tuple(n for n in range(nodes.nnodes) if n != nodes.node_rank)
    counted = CLIENTS_JOINED.findall(job.output_tail)
    if nodes.rendezvous == STATIC and nodes.node_rank == 0 and counted:
        joined, expected = (int(x) for x in counted[-1])
        count = max(0, expected - joined)
        absent = _not_seen(facts, others)
        if absent is not None and len(absent) == count:
            return MissingNodes(count, absent, exact=True, joined=joined)
        return MissingNodes(count, others, exact=count == len(others), joined=joined)
    if nodes.rendezvous == STATIC and nodes.node_rank not in (0, None):
        others = tuple(n for n in others if n != 0)  # node 0 answered the preflight
    return MissingNodes(None, others, exact=len(others) == 1)


def _missing_in_c10d(facts: FactSet) -> MissingNodes:
    """c10d gives nodes their ranks only when they meet: the node hosting the endpoint counts
    the other nodes' connections to it (a fixed --nnodes only)."""
    nodes, network, job = facts.plan.nodes, facts.network, facts.job
    if nodes is None or network is None or job is None or network.port is not None:
        return MissingNodes(None, (), exact=False)
    own = {address for interface in network.interfaces for address in interface.addresses}
    came = tuple(address for address in job.store_peers if address not in own)
    if nodes.min_nodes != nodes.nnodes:
        return MissingNodes(None, (), exact=False, arrived_from=came)
    count = max(0, nodes.nnodes - 1 - len(came))
    return MissingNodes(count, (), exact=False, joined=len(came) + 1, arrived_from=came)


def _not_seen(facts: FactSet, others: tuple[int, ...]) -> tuple[int, ...] | None:
    """The nodes whose address never held a connection to the store on this node, where the
    plan names every node's host (SLURM) and the preflight resolved them all."""
    nodes, network, job = facts.plan.nodes, facts.network, facts.job
    if not nodes or not nodes.hosts or network is None or job is None:
        return None
    addresses = [network.node_addresses.get(nodes.hosts[n]) for n in others if n < len(nodes.hosts)]
    if len(addresses) != len(others) or None in addresses:
        return None
    return tuple(n for n, a in zip(others, addresses, strict=True) if a not in job.store_peers)


def node_label(facts: FactSet, node_rank: int) -> str:
    """ "node 1 (gpu02)": the host from the plan, else from the node's ranks."""
    nodes, job = facts.plan.nodes, facts.job
    host = nodes.host_of(node_rank) if nodes else None
    if host is None and job is not None:
        host = next((r.host for r in job.ranks if r.node_rank == node_rank and r.host), None)
    return f"node {node_rank}" + (f" ({host})" if host else "")


def node_of_rank(facts: FactSet, rank: int) -> int | None:
    """The node a rank ran on: as the rank said, else where static torchrun puts it."""
    job, nodes = facts.job, facts.plan.nodes
    facts_of_rank = job.rank(rank) if job else None
    if facts_of_rank is not None and facts_of_rank.node_rank is not None:
        return facts_of_rank.node_rank
    if nodes is not None and nodes.rendezvous == STATIC and job and job.nproc:
        return rank // job.nproc
    return None


def nodes_of_ranks(facts: FactSet, ranks: Iterable[int]) -> list[int]:
    found = {node_of_rank(facts, rank) for rank in ranks}
    return sorted(n for n in found if n is not None)
