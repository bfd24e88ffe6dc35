"""Node 0's report covers every node: each other node's own probes (host, environment,
network, its torch ...) are judged as that node's doctor judged them, with the job as that
node saw it (its own ranks, the fixes it applied), and its findings are added under its name.
What the whole job shows (DDP202, DDP3xx-DDP5xx) node 0 already judged over every rank, so
those codes are not taken from the other nodes. A finding several nodes share is given once,
naming them all. Nodes alike (ClusterFacts.groups) are judged once, from their group's first
node other than this one, and the findings name every node of the group."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from ddp_doctor.codec import CodecError
from ddp_doctor.facts.cluster import ClusterFacts, ClusterNode
from ddp_doctor.facts.job import JobFacts, Preflight
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.runs import host_list, number_ranges
from ddp_doctor.model import Finding, ProbeResult, ProbeStatus
from ddp_doctor.registry import Selector

# Judged once, over the whole job, by node 0 itself; and the exchange's own codes.
WHOLE_JOB_CODES = ("DDP202", "DDP216", "DDP217", "DDP218", "DDP3", "DDP4", "DDP5")


def with_other_nodes(
    facts: FactSet,
    findings: list[Finding],
    judge: Callable[[list[ProbeResult], Selector | None], list[Finding]],
    selector: Selector | None = None,
) -> list[Finding]:
    """`findings` (this node's) with every other node's own findings added, each node judged
    by `judge` (judge.judge, handed in: it calls this pass)."""

    cluster = facts.cluster
    if cluster is None or not cluster.whole:
        return findings
    own = {(f.code, f.message): f for f in findings}
    elsewhere: dict[tuple[str, str], tuple[Finding, list[ClusterNode]]] = {}
    for node, alike in _to_judge(cluster):
        for finding in judge([*node_results(node), *_job_seen_by(node, facts)], selector):
            key = (finding.code, finding.message)
            if finding.code.startswith(WHOLE_JOB_CODES):
                continue
            if key in own:  # the same problem, word for word, here too
                own[key] = _naming_nodes(
                    own[key], [cluster.node_rank, *(n.node_rank for n in alike)]
                )
            else:
                elsewhere.setdefault(key, (finding, []))[1].extend(alike)
    added = [_on_nodes(finding, nodes) for finding, nodes in elsewhere.values()]
    return [*own.values(), *added]


def _to_judge(cluster: ClusterFacts) -> list[tuple[ClusterNode, list[ClusterNode]]]:
    """(a node with its probes, the nodes its findings stand for), this node left out."""
    others = {n.node_rank: n for n in cluster.nodes if n.node_rank != cluster.node_rank}
    chosen = []
    for group in cluster.groups:
        alike = [others[number] for number in group.nodes if number in others]
        if alike and group.probes:
            chosen.append((dataclasses.replace(alike[0], probes=group.probes), alike))
    grouped = {number for group in cluster.groups for number in group.nodes}
    chosen += [(n, [n]) for n in others.values() if n.probes and n.node_rank not in grouped]
    return chosen


def node_results(node: ClusterNode) -> list[ProbeResult]:
    """That node's probes as its doctor saw them; entries that do not decode are left out."""
    from ddp_doctor.report_io import probe_from_json

    results = []
    for entry in node.probes:
        try:
            results.append(probe_from_json(entry))
        except (CodecError, KeyError, TypeError, ValueError):
            continue
    return results


def _job_seen_by(node: ClusterNode, facts: FactSet) -> list[ProbeResult]:
    """The job as that node's doctor saw it: its own ranks and the fixes it applied."""
    job = facts.job
    if job is None:
        return []
    own = tuple(rank for rank in job.ranks if rank.rank in node.ranks)
    seen = JobFacts(
        launched=job.launched,
        preflight=Preflight(job.preflight.master_addr, job.preflight.master_address),
        backend=job.backend,
        nproc=len(own),
        timed_out=job.timed_out,
        ranks=own,
        nnodes=job.nnodes,
        applied_fixes=node.applied_fixes,
    )
    return [ProbeResult("job", ProbeStatus.OK, seen, 0.0)]


def _on_nodes(finding: Finding, nodes: list[ClusterNode]) -> Finding:
    if len(nodes) > 3:  # many: as number ranges and a host list
        hosts = host_list([n.host or "?" for n in nodes])
        label = f"{len(nodes):,} nodes {number_ranges(n.node_rank for n in nodes)} ({hosts})"
        tagged = dataclasses.replace(finding, message=f"{label}: {finding.message}")
        return _naming_nodes(tagged, [n.node_rank for n in nodes])
    labels = [f"{n.node_rank}" + (f" ({n.host})" if n.host else "") for n in nodes]
    label = ("node " if len(labels) == 1 else "nodes ") + ", ".join(labels)
    tagged = dataclasses.replace(finding, message=f"{label}: {finding.message}")
    return _naming_nodes(tagged, [n.node_rank for n in nodes])


def _naming_nodes(finding: Finding, nodes: Iterable[int | None]) -> Finding:
    known = finding.evidence.get("nodes")
    listed = [*(known if isinstance(known, list) else []), *nodes]
    numbers = sorted({n for n in listed if isinstance(n, int)})
    return dataclasses.replace(finding, evidence={**finding.evidence, "nodes": numbers})
