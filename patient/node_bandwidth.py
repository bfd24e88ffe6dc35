"""Inside a multi-node job: the all-reduce sweep inside each node and across nodes.

With several ranks per node, the sweep over all ranks mixes the fast links inside a node with
the network between nodes. Here every node's ranks sweep as one group (all nodes at once, as
training loads them), then one rank per node sweeps across the nodes. Each node's lowest rank
keeps its node's rows; rank 0 keeps the inter-node rows. Standard library and torch only.
"""

from __future__ import annotations

import os
from typing import Any

from .bandwidth import sweep


def sweep_nodes(torch: Any, device: Any, sizes: list[int], iters: int, rank: int) -> dict:
    dist = torch.distributed
    nodes = _ranks_per_node(torch, device, int(os.environ.get("GROUP_RANK", "0")))
    if len(nodes) < 2 or all(len(ranks) < 2 for ranks in nodes.values()):
        return {}  # one node, or one rank per node: the main sweep already says it all
    # new_group is called by every rank for every group, in the same order.
    groups = {node: dist.new_group(ranks) for node, ranks in sorted(nodes.items())}
    leaders = [ranks[0] for _, ranks in sorted(nodes.items())]
    across = dist.new_group(leaders)
    data: dict[str, Any] = {}
    node, ranks = next((n, r) for n, r in nodes.items() if rank in r)
    if len(ranks) > 1:
        rows = sweep(torch, device, sizes, iters, group=groups[node])
        if rank == ranks[0]:
            data["intra_node"] = {"node": node, "ranks": ranks, "rows": rows}
    dist.barrier()
    if rank in leaders:
        rows = sweep(torch, device, sizes, iters, group=across)
        if rank == 0:
            data["inter_node"] = {"ranks": leaders, "rows": rows}
    dist.barrier()
    return data


def _ranks_per_node(torch: Any, device: Any, group_rank: int) -> dict[int, list[int]]:
    """torchrun's group rank of every rank, gathered: {node: [ranks]}."""
    dist = torch.distributed
    mine = torch.tensor([group_rank], dtype=torch.int64, device=device)
    everyone = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    nodes: dict[int, list[int]] = {}
    for rank, value in enumerate(everyone):
        nodes.setdefault(int(value.item()), []).append(rank)
    return nodes
