"""Several nodes' attach facts as one job: `diagnose node0.json node1.json` (one `attach
--format json` per node, from srun, pdsh, kubectl exec or ssh) judges the merged ranks, so the
verdict names the node and rank that lag. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ddp_doctor.facts.attach import AttachFacts


class MergeError(ValueError):
    """The reports do not describe one job."""


def merge_nodes(nodes: Sequence[AttachFacts]) -> AttachFacts:
    if not nodes:
        raise MergeError("no attach facts to merge")
    ranks, seen = [], set()
    for node in nodes:
        for rank in node.ranks:
            key = (rank.host or node.hostname, rank.pid)
            if key not in seen:
                seen.add(key)
                ranks.append(replace(rank, host=rank.host or node.hostname))
    numbers = [r.rank for r in ranks if r.rank is not None]
    if len(numbers) != len(set(numbers)):
        raise MergeError(
            "two reports hold the same rank: they are not nodes of one job (or one node twice)"
        )
    first = nodes[0]
    hosts = tuple(dict.fromkeys(h for n in nodes for h in (n.nodes or (n.hostname,))))
    ranks.sort(key=lambda r: (r.rank is None, r.rank or 0, r.host, r.pid))
    return replace(
        first,
        job_id=" + ".join(dict.fromkeys(n.job_id for n in nodes)),
        sample_count=min(n.sample_count for n in nodes),
        ranks=tuple(ranks),
        other_jobs=(),
        nodes=hosts,
        duration_s=max(n.duration_s for n in nodes),
    )
