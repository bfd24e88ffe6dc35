"""Nodes alike, for node 0's report: a node's digest covers its own facts apart from what is
rightly its own (names, addresses, timings, GPU UUIDs, processes), and nodes whose digests
and ranks' fingerprints agree form one group, described once ("1,022 nodes identical: torch
2.13.0+cu130, NCCL 2.28.9, 8x H200 ...; node-0417 differs: NCCL 2.21.5")."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ddp_doctor.facts.cluster import NodeGroup
from ddp_doctor.facts.job import Identity

# Keys whose values are each node's own, at any depth of its probes' JSON.
OWN_KEYS = frozenset(
    {
        "duration_s", "hostname", "port", "uuid", "processes", "memory_used_bytes",
        "used_memory_bytes", "pid", "mig_devices", "created",
        # a static rendezvous gives every node its own rank, and node 0 alone hosts the master
        "node_rank", "master_is_local",
    }
)  # fmt: skip
# Keys holding addresses: each node has its own, but whether they are loopback matters.
ADDRESS_KEYS = frozenset(
    {"hostname_address", "hostname_addresses", "addresses", "route_address", "master_address",
     "node_addresses"}
)  # fmt: skip
RANK_OWN = (
    "rank",
    "local_rank",
    "host",
    "pid",
    "device",
    "pci_bus_id",
    "cpu_affinity",
    "group_rank",
)
SUMMARY_FIELDS = (
    ("torch", "torch_version"),
    ("CUDA", "cuda_version"),
    ("NCCL", "nccl_version"),
    ("driver", "driver_version"),
    ("Python", "python_version"),
)


def digest_of(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def without_own(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: _address_kinds(v) if k in ADDRESS_KEYS else without_own(v)
            for k, v in value.items()
            if k not in OWN_KEYS
        }
    if isinstance(value, (list, tuple)):
        return [without_own(v) for v in value]
    return value


def _address_kinds(value: Any) -> Any:
    """An address as the kind a rule tells apart: loopback or not."""
    if isinstance(value, str):
        return "loopback" if value.startswith("127.") or value == "::1" else "address"
    if isinstance(value, Mapping):
        return {k: _address_kinds(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_address_kinds(v) for v in value]
    return value


def node_digest(probes: Sequence[Any]) -> str:
    return digest_of(without_own(list(probes)))


def rank_fingerprint(identity: Identity) -> list[Any]:
    from ddp_doctor.codec import _field_names

    names = [n for n in _field_names(Identity) or () if n not in RANK_OWN]
    values = [getattr(identity, name) for name in names]
    return [sorted(v.items()) if isinstance(v, Mapping) else v for v in values]


def group_nodes(
    nodes: Sequence[Any], identities: Sequence[Identity], probes_of: Mapping[int, Sequence[Any]]
) -> tuple[NodeGroup, ...]:
    """ClusterNodes grouped by their digest and their ranks' fingerprints, largest first."""
    by_node: dict[int, list[Identity]] = {}
    for identity in identities:
        node = identity.group_rank if identity.group_rank is not None else 0
        by_node.setdefault(node, []).append(identity)
    members: dict[str, list[Any]] = {}
    for node in nodes:
        ranks = sorted(by_node.get(node.node_rank, []), key=lambda i: i.local_rank)
        key = digest_of(
            [
                node.digest or node_digest(probes_of.get(node.node_rank, ())),
                *map(rank_fingerprint, ranks),
            ]
        )
        members.setdefault(key, []).append(node)
    ordered = sorted(members.values(), key=lambda group: (-len(group), group[0].node_rank))
    summaries = [
        _summary(by_node.get(group[0].node_rank, []), probes_of.get(group[0].node_rank, ()))
        for group in ordered
    ]
    groups = []
    for group, summary in zip(ordered, summaries, strict=True):
        first = group[0].node_rank
        groups.append(
            NodeGroup(
                nodes=tuple(n.node_rank for n in group),
                hosts=tuple(n.host or "?" for n in group),
                summary=summary,
                differs=_differs(summary, summaries[0]) if groups else {},
                probes=tuple(probes_of.get(first, ())),
            )
        )
    if len(groups) > 1:
        groups = _with_facts_differences(groups)
    return tuple(groups)


def _summary(ranks: Sequence[Identity], probes: Sequence[Any]) -> dict[str, str]:
    summary: dict[str, str] = {}
    first = ranks[0] if ranks else None
    for label, attribute in SUMMARY_FIELDS:
        value = getattr(first, attribute, None) if first else None
        if value:
            summary[label] = str(value)
    models: dict[str, int] = {}
    for identity in ranks:
        models[identity.gpu_name or identity.device.split(":")[0]] = (
            models.get(identity.gpu_name or identity.device.split(":")[0], 0) + 1
        )
    if models:
        summary["ranks"] = ", ".join(f"{count}x {model}" for model, count in models.items())
    for name, value in sorted((first.variables if first else {}).items()):
        summary[name] = value
    if not ranks:
        summary["ranks"] = "none reported"
    return summary


def _differs(summary: Mapping[str, str], largest: Mapping[str, str]) -> dict[str, str]:
    keys = list(dict.fromkeys([*largest, *summary]))
    return {k: summary.get(k, "unset") for k in keys if summary.get(k) != largest.get(k)}


def _with_facts_differences(groups: list[NodeGroup]) -> list[NodeGroup]:
    """Groups alike in their summary but apart in their own facts: name the probes that
    differ from the largest group's."""
    import dataclasses

    largest = {p.get("probe"): without_own(p) for p in groups[0].probes if isinstance(p, Mapping)}
    out = [groups[0]]
    for group in groups[1:]:
        differs = dict(group.differs)
        for probe in group.probes:
            if isinstance(probe, Mapping) and without_own(probe) != largest.get(probe.get("probe")):
                differs.setdefault(f"{probe.get('probe')} facts", "differ")
        out.append(dataclasses.replace(group, differs=differs))
    return out
