"""A multi-node run's part of a report: the plan and where each value came from; on node 0
every node with its ranks, the fixes it ran with and its own bandwidth, the slowest node, and
the sweep across nodes; on the other nodes one line pointing to node 0's report."""

from __future__ import annotations

import statistics
from typing import Any

from ddp_doctor.facts.folding import fold_cluster
from ddp_doctor.facts.runs import decode_column, parse_ranges
from ddp_doctor.render.columns import plain_table
from ddp_doctor.render.facts_text import one_line
from ddp_doctor.render.job_tables import bandwidth_rows, bandwidth_table

SOURCE_ORDER = ("nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint", "hosts")


def render_cluster_text(
    cluster: dict[str, Any], job: dict[str, Any] | None, plan: dict[str, Any] | None
) -> str:
    parts = [_plan_line(plan.get("nodes") if plan else None, cluster)]
    if not cluster.get("whole"):
        parts.append(pointer_line(cluster))
        return "\n".join(parts)
    cluster = fold_cluster(cluster)  # the same groups in every format
    if cluster.get("isolation"):
        parts.append(isolation_line(cluster["isolation"]))
    if len(cluster.get("groups") or []) > 1 or cluster.get("node_runs"):
        parts.append(groups_text(cluster))
    if cluster.get("nodes") or cluster.get("node_runs"):
        parts.append(_nodes_table(cluster, job or {}))
    slowest = slowest_node(job or {})
    if slowest:
        parts.append(slowest)
    across = (job or {}).get("inter_node_bandwidth") or []
    if across:
        parts.append(_across_table(job or {}))
    elif _one_rank_per_node(job or {}) and (job or {}).get("bandwidth"):
        parts.append("one rank per node: the all-reduce table above is the bandwidth across nodes")
    return "\n\n".join(parts)


def pointer_line(cluster: dict[str, Any]) -> str:
    node0 = f"node 0 ({cluster['node0_host']})" if cluster.get("node0_host") else "node 0"
    me = f"node {cluster.get('node_rank')}" if cluster.get("node_rank") is not None else "a node"
    if not cluster.get("verdict_received"):
        return (
            f"this is {me}: {node0} prints the whole cluster's report; its verdict never came back"
        )
    verdict = cluster.get("verdict") or []
    counts = _counts(verdict)
    return f"this is {me}: {node0} prints the whole cluster's report; its verdict: {counts}" + (
        f" ({', '.join(dict.fromkeys(f['code'] for f in verdict))})" if verdict else ""
    )


def slowest_node(job: dict[str, Any]) -> str | None:
    """The node whose own sweep reached the lowest busbw at the largest size."""
    measured = []
    for node in job.get("node_bandwidth") or []:
        rows = node.get("rows") or []
        if rows:
            largest = max(rows, key=lambda row: row["size_bytes"])
            measured.append((largest["busbw_gbps"], largest["size_bytes"], node))
    if len(measured) < 2:
        return None
    busbw, size, node = min(measured, key=lambda item: item[0])
    host = f" ({node['host']})" if node.get("host") else ""
    return (
        f"slowest node: node {node['node_rank']}{host}, {busbw:.3f} GB/s busbw at {size} B "
        "inside the node"
    )


def isolation_line(isolation: dict[str, Any]) -> str:
    """--isolate's outcome: every pair passed (with the bandwidth spread), or the bad nodes."""
    pairs = isolation.get("pairs") or []
    rounds = isolation.get("rounds") or 0
    speeds = [p["gbps"] for p in pairs if isinstance(p.get("gbps"), (int, float))]
    spread = (
        f"; pair bandwidth {min(speeds):.3g} / {statistics.median(speeds):.3g} / "
        f"{max(speeds):.3g} GB/s (lowest / median / highest)"
        if speeds
        else ""
    )
    if isolation.get("bad") or isolation.get("unsettled"):
        bad = ", ".join(map(str, isolation.get("bad") or [])) or "none"
        unsettled = ", ".join(map(str, isolation.get("unsettled") or []))
        rest = f"; unsettled: {unsettled}" if unsettled else ""
        return f"pair tests: {len(pairs)} pairs in {rounds} rounds; bad nodes: {bad}{rest}{spread}"
    under = len(isolation.get("under_band") or [])
    banded = isolation.get("banded_pairs") or 0
    if under:
        return (
            f"pair tests: every pair passed against the median ({len(pairs)} pairs in {rounds} "
            f"rounds), {under} of {banded} far under their links' stated band{spread}"
        )
    within = f", none of {banded} far under their links' stated band" if banded else ""
    slow_once = _slow_once(isolation, pairs)
    if slow_once:
        return (
            f"pair tests: every node passed ({len(pairs)} pairs in {rounds} rounds{within}; "
            f"{slow_once} pair(s) slow once, their nodes then passed beside others){spread}"
        )
    return f"pair tests: every pair passed ({len(pairs)} pairs in {rounds} rounds{within}){spread}"


def _slow_once(isolation: dict[str, Any], pairs: list[dict[str, Any]]) -> int:
    """Pairs judged slow whose nodes the rounds then cleared (a moment's load)."""
    from ddp_doctor.patient.pair_rounds import SLOW, pair_outcome

    reference, below = isolation.get("median_gbps"), isolation.get("slow_below")
    if not isinstance(reference, (int, float)) or not isinstance(below, (int, float)):
        return 0
    return sum(
        pair_outcome(True, True, p["gbps"], reference, below) == SLOW
        for p in pairs
        if p.get("connected") and isinstance(p.get("gbps"), (int, float))
    )


SHOWN_GROUPS = 24  # lines of groups, so the report stays short however many nodes differ
SHOWN_NODE_ROWS = 48
LINE_CHARS = 240
SUMMARY_SHOWN = ("torch", "CUDA", "NCCL", "driver", "Python", "ranks")


def groups_text(cluster: dict[str, Any]) -> str:
    """ "1,023 nodes identical: torch ..., NCCL ...; node-0417 differs: NCCL 2.21.5"."""
    lines = ["nodes alike (the same facts apart from names, addresses and timings):"]
    groups = cluster.get("groups") or []
    for index, group in enumerate(groups[:SHOWN_GROUPS]):
        nodes = _node_numbers(group.get("nodes"))
        hosts = group.get("hosts")
        hosts = hosts if isinstance(hosts, list) else decode_column(hosts, len(nodes))
        named = _compact_hosts(hosts)
        summary = group.get("summary") or {}
        if index == 0:
            shown = ", ".join(f"{k} {summary[k]}" for k in SUMMARY_SHOWN if summary.get(k))
            count = f"{len(nodes):,} node{'s' if len(nodes) != 1 else ''}"
            lines.append(f"  {count} identical ({named}): {shown or 'no fingerprint reported'}")
        else:
            differs = ", ".join(f"{k} {v}" for k, v in (group.get("differs") or {}).items())
            differs, named = one_line(differs, LINE_CHARS), one_line(named, LINE_CHARS)
            who = named if len(nodes) == 1 else f"{len(nodes):,} nodes ({named})"
            lines.append(f"  {who} differ{'s' if len(nodes) == 1 else ''}: {differs or '-'}")
    if len(groups) > SHOWN_GROUPS:
        rest = sum(len(_node_numbers(g.get("nodes"))) for g in groups[SHOWN_GROUPS:])
        lines.append(
            f"  ... {len(groups) - SHOWN_GROUPS} more groups ({rest:,} nodes): "
            "--format json has them"
        )
    return "\n".join(lines)


def _node_numbers(value: Any) -> list[int]:
    return parse_ranges(value) if isinstance(value, str) else list(value or [])


def _compact_hosts(hosts: list[str]) -> str:
    from ddp_doctor.facts.runs import host_list

    return host_list(hosts) if len(hosts) > 3 else ", ".join(hosts)


def _plan_line(nodes: dict[str, Any] | None, cluster: dict[str, Any]) -> str:
    if not nodes:
        return f"cluster: {cluster.get('nnodes')} nodes"
    where = f"{nodes['master_addr']}:{nodes['master_port']}"
    sizes = (
        nodes["nnodes"]
        if nodes["min_nodes"] == nodes["nnodes"]
        else (f"{nodes['min_nodes']}:{nodes['nnodes']}")
    )
    rank = f", node rank {nodes['node_rank']}" if nodes.get("node_rank") is not None else ""
    sources = nodes.get("sources") or {}
    came = [f"{key} from {sources[key]}" for key in SOURCE_ORDER if key in sources]
    return f"cluster: {sizes} nodes, {nodes['rendezvous']} rendezvous at {where}{rank}" + (
        f" ({'; '.join(came)})" if came else ""
    )


def _nodes_table(cluster: dict[str, Any], job: dict[str, Any]) -> str:
    busbw = {
        node["node_rank"]: max(node["rows"], key=lambda row: row["size_bytes"])["busbw_gbps"]
        for node in job.get("node_bandwidth") or []
        if node.get("rows")
    }
    rows = []
    for run in cluster.get("node_runs") or []:
        numbers = parse_ranges(run["nodes"])
        hosts = decode_column((run.get("columns") or {}).get("host", {"all": "?"}), len(numbers))
        speeds = [busbw[n] for n in numbers if n in busbw]
        fixes = ", ".join(f"{k}={v}" for k, v in (run.get("applied_fixes") or {}).items())
        rows.append(
            [
                one_line(run["nodes"], LINE_CHARS),
                one_line(_compact_hosts(hosts), LINE_CHARS),
                f"{run.get('ranks_per_node')} per node",
                "yes" if run.get("reported") else "no",
                fixes or "-",
                f"{min(speeds):.3f}-{max(speeds):.3f}" if speeds else "-",
            ]
        )
    for node in cluster["nodes"]:
        fixes = ", ".join(f"{k}={v}" for k, v in (node.get("applied_fixes") or {}).items())
        rows.append(
            [
                str(node["node_rank"]),
                node.get("host") or "?",
                ", ".join(str(r) for r in node.get("ranks") or []) or "-",
                "yes" if node.get("reported") else "no",
                fixes or "-",
                f"{busbw[node['node_rank']]:.3f}" if node["node_rank"] in busbw else "-",
            ]
        )
    headers = ("node", "host", "ranks", "facts", "fixes applied", "busbw in node (GB/s)")
    table = plain_table(rows[:SHOWN_NODE_ROWS], headers, right=(0, 5))  # number and busbw
    if len(rows) > SHOWN_NODE_ROWS:
        table += f"\n... {len(rows) - SHOWN_NODE_ROWS} more rows: --format json has them"
    return table


def _across_table(job: dict[str, Any]) -> str:
    title = "all-reduce bandwidth across nodes (one rank per node; busbw = algbw x 2(n-1)/n)"
    # No expectation across nodes: the topology seen is one node's.
    rows = [
        {"redop": "sum", **row, "expected_gbps": None, "percent_of_expected": None}
        for row in job["inter_node_bandwidth"]
    ]
    return f"{title}\n{bandwidth_table(bandwidth_rows({'rows': rows}))}"


def _one_rank_per_node(job: dict[str, Any]) -> bool:
    nodes = [r.get("node_rank") for r in job.get("ranks") or []]
    return len(nodes) > 1 and None not in nodes and len(set(nodes)) == len(nodes)


def _counts(verdict: list[dict[str, Any]]) -> str:
    if not verdict:
        return "no problems"
    counts: dict[str, int] = {}
    for finding in verdict:
        counts[finding["severity"]] = counts.get(finding["severity"], 0) + 1
    order = ("error", "warning", "info")
    return ", ".join(
        f"{counts[s]} {s}{'s' if counts[s] > 1 and s != 'info' else ''}"
        for s in order
        if s in counts
    )
