"""The cluster as facts: node 0 turns what rank 0 gathered through the job's store (every
rank's journal, every node's entry, each distinct fingerprint and node facts once) into one
JobFacts over all ranks and a ClusterFacts naming every node and grouping nodes alike; the
other nodes keep node 0's verdict as it came back."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ddp_doctor.facts.cluster import (
    ClusterFacts,
    ClusterNode,
    IsolationFacts,
    NodeLink,
    VerdictFinding,
)
from ddp_doctor.facts.job import Identity, JobFacts, RankFacts
from ddp_doctor.model import Finding
from ddp_doctor.probes.job.results import (
    identities_of,
    inter_node_rows_of,
    node_bandwidth_of,
    rank_facts,
    rows_of,
)
from ddp_doctor.readings.nccl_debug import without_doctor_env
from ddp_doctor.run.node_groups import group_nodes


def whole_job(local: JobFacts, document: Mapping[str, Any]) -> JobFacts:
    """`local` (this node's job) with every rank of the cluster, as rank 0 gathered them."""
    identities = _fingerprinted(document, _journals(document))
    # with every identity read from its fingerprint, the journals' compact ones can stay
    journals = _journals(document) if identities else _whole_journals(document)
    own = {rank.rank: rank for rank in local.ranks}
    ranks = []
    for number in range(_count(document, "world_size", len(own))):
        entry = journals.get(number)
        if entry is not None:
            exit_code = own[number].exit_code if number in own else None
            ranks.append(rank_facts(number, list(entry.get("records") or []), exit_code))
        else:
            ranks.append(own.get(number, RankFacts(number)))
    every = tuple(ranks)
    return dataclasses.replace(
        local,
        ranks=every,
        identities=without_doctor_env(
            identities or identities_of(every), _doctor_env_of(local, document)
        ),
        bandwidth=rows_of(every),
        node_bandwidth=node_bandwidth_of(every),
        inter_node_bandwidth=inter_node_rows_of(every),
        backend=backend_used(every) or local.backend,
    )


def _doctor_env_of(local: JobFacts, document: Mapping[str, Any]) -> Any:
    """What each rank's node set for its own job (each node's doctor decides for its own)."""
    nodes = dict(document.get("nodes") or {})

    def of(identity: Identity) -> Mapping[str, str]:
        doc = nodes.get(str(identity.group_rank)) if identity.group_rank is not None else None
        if isinstance(doc, dict) and isinstance(doc.get("doctor_env"), dict):
            return doc["doctor_env"]
        return local.doctor_env

    return of


def whole_cluster(job: JobFacts, document: Mapping[str, Any], node_rank: int) -> ClusterFacts:
    """Every node that took part, with its ranks; nodes alike grouped, each group holding its
    first node's own probes."""
    node_docs = {int(k): v for k, v in dict(document.get("nodes") or {}).items() if k.isdigit()}
    node_facts = dict(document.get("node_facts") or {})
    reported = set(_journals(document))
    members: dict[int, list[RankFacts]] = {}
    for rank in job.ranks:
        if rank.node_rank is not None:
            members.setdefault(rank.node_rank, []).append(rank)
    nodes, probes_of = [], {}
    for number in range(_count(document, "group_world_size", len(members))):
        doc = node_docs.get(number) or {}
        doc = doc if isinstance(doc, dict) else {}
        ranks = members.get(number, [])
        host = doc.get("host") or next((r.host for r in ranks if r.host), None)
        own = doc.get("probes") if "probes" in doc else node_facts.get(str(doc.get("digest")))
        probes_of[number] = _with_torch(list(own or []), ranks)
        nodes.append(
            ClusterNode(
                node_rank=number,
                host=host,
                ranks=tuple(r.rank for r in ranks),
                reported=bool(doc),
                applied_fixes=dict(doc.get("applied_fixes") or {}),
                digest=doc.get("digest") if isinstance(doc.get("digest"), str) else None,
                link=_link(doc.get("link")),
            )
        )
    return ClusterFacts(
        isolation=isolation_of(
            job.ranks, len(nodes), {n.node_rank: n.link for n in nodes if n.link}, job.backend
        ),
        nnodes=len(nodes),
        node_rank=node_rank,
        whole=True,
        nodes=tuple(nodes),
        missing_ranks=tuple(r.rank for r in job.ranks if r.rank not in reported),
        groups=group_nodes(nodes, job.identities, probes_of),
    )


def isolation_of(
    ranks: Sequence[RankFacts],
    nnodes: int,
    links: Mapping[int, NodeLink] | None = None,
    backend: str | None = None,
) -> IsolationFacts | None:
    """`run --isolate`: the pair outcomes rank 0 (node 0's coordinator) recorded, settled,
    and each pair against its nodes' stated link rates where they are known."""
    from ddp_doctor.run.isolation import SLOW_BELOW, isolation_facts, pair_tests

    rank0 = next((rank for rank in ranks if rank.rank == 0), None)
    record = rank0.stage("isolate") if rank0 else None
    if record is None:
        return None
    rows = record.data.get("pairs") if record.ended else None
    tests = pair_tests(rows if isinstance(rows, list) else [])
    below = record.data.get("slow_below")
    slow_below = below if isinstance(below, (int, float)) and 0 < below < 1 else SLOW_BELOW
    return isolation_facts(nnodes, tests, links=links, backend=backend, slow_below=slow_below)


def _link(value: Any) -> NodeLink | None:
    """A node's link as its document gave it; None where absent or malformed."""
    from ddp_doctor.codec import CodecError, from_jsonable

    if not isinstance(value, dict):
        return None
    try:
        return from_jsonable(NodeLink, value)
    except (CodecError, TypeError):
        return None


def member_cluster(
    nnodes: int, node_rank: int | None, verdict: Mapping[str, Any] | None
) -> ClusterFacts:
    findings = list((verdict or {}).get("findings") or [])
    received = verdict is not None and "findings" in verdict
    return ClusterFacts(
        nnodes=nnodes,
        node_rank=node_rank,
        whole=False,
        node0_host=(verdict or {}).get("host"),
        verdict_received=received,
        verdict=tuple(
            VerdictFinding(str(f.get("code")), str(f.get("severity")), str(f.get("message")))
            for f in findings
            if isinstance(f, dict)
        ),
    )


def verdict_document(findings: list[Finding], host: str) -> dict[str, Any]:
    return {
        "host": host,
        "findings": [
            {"code": f.code, "severity": f.severity.word, "message": f.message} for f in findings
        ],
    }


def backend_used(ranks: tuple[RankFacts, ...]) -> str | None:
    for rank in ranks:
        record = rank.stage("init")
        if record and record.ended and record.ok:
            return str(record.data.get("backend"))
    return None


def _with_torch(probes: list[Any], ranks: list[RankFacts]) -> list[Any]:
    """The node's torch as its first rank described it (no separate torch probe ran there)."""
    if any(isinstance(p, dict) and p.get("probe") == "torch" for p in probes):
        return probes
    for rank in sorted(ranks, key=lambda r: r.rank):
        record = rank.stage("identity")
        described = record.data.get("torch") if record and record.ok else None
        if isinstance(described, dict):
            entry = {"probe": "torch", "status": "ok", "duration_s": 0.0, "facts": described}
            return [*probes, {**entry, "error": None}]
    return probes


def _journals(document: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    journals = dict(document.get("journals") or {})
    return {int(k): v for k, v in journals.items() if str(k).isdigit() and isinstance(v, dict)}


def _fingerprinted(
    document: Mapping[str, Any], journals: Mapping[int, Mapping[str, Any]]
) -> tuple[Identity, ...]:
    """Every rank's identity, each fingerprint decoded once and the rank's own fields put in;
    () where a rank's identity came without a fingerprint (the generic path reads those)."""
    import dataclasses as dc

    from ddp_doctor.codec import CodecError, from_jsonable

    compact = {}
    for number, entry in sorted(journals.items()):
        record = next(
            (
                r
                for r in entry.get("records") or []
                if r.get("stage") == "identity" and r.get("data")
            ),
            None,
        )
        identity = (record or {}).get("data", {}).get("identity")
        if not isinstance(identity, dict) or "fingerprint" not in identity:
            return ()
        compact[number] = identity
    decoded: dict[str, Identity] = {}
    found = []
    for identity in compact.values():
        own = {k: v for k, v in identity.items() if k != "fingerprint"}
        digest = str(identity["fingerprint"])
        try:
            if digest not in decoded:
                decoded[digest] = from_jsonable(
                    Identity, _whole_identity(identity, _prints(document))
                )
                found.append(decoded[digest])
                continue
            found.append(dc.replace(decoded[digest], **_typed_own(own)))
        except (CodecError, TypeError, ValueError):
            continue
    return tuple(found)


def _prints(document: Mapping[str, Any]) -> Mapping[str, Any]:
    prints = document.get("fingerprints")
    return prints if isinstance(prints, dict) else {}


def _typed_own(own: Mapping[str, Any]) -> dict[str, Any]:
    from ddp_doctor.facts.folding import OWN_TYPES

    checked = {k: v for k, v in own.items() if k in OWN_TYPES or k in ("rank", "pid")}
    for key in ("rank", "pid"):
        if key in checked and type(checked[key]) is not int:
            raise TypeError(f"{key} is not an integer")
    for key, value in checked.items():
        if key in OWN_TYPES and type(value) not in OWN_TYPES[key]:
            raise TypeError(f"{key} has the wrong type")
    return checked


def _whole_journals(document: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    """The journals with each identity's fingerprint, sent once per digest, put back."""
    fingerprints = {
        k: v for k, v in dict(document.get("fingerprints") or {}).items() if isinstance(v, dict)
    }
    journals = _journals(document)
    if not fingerprints:
        return journals
    return {
        number: {
            **entry,
            "records": [_whole_record(r, fingerprints) for r in entry.get("records") or []],
        }
        for number, entry in journals.items()
    }


def _whole_record(record: Any, fingerprints: Mapping[str, Any]) -> Any:
    data = record.get("data") if isinstance(record, dict) else None
    if record.get("stage") != "identity" or not isinstance(data, dict):
        return record
    data = dict(data)
    if isinstance(data.get("identity"), dict):
        data["identity"] = _whole_identity(data["identity"], fingerprints)
    if isinstance(data.get("identities"), list):
        data["identities"] = [_whole_identity(i, fingerprints) for i in data["identities"]]
    return {**record, "data": data}


def _whole_identity(identity: Any, fingerprints: Mapping[str, Any]) -> Any:
    if not isinstance(identity, dict) or "fingerprint" not in identity:
        return identity
    own = {k: v for k, v in identity.items() if k != "fingerprint"}
    return {**fingerprints.get(str(identity["fingerprint"]), {}), **own}


def _count(document: Mapping[str, Any], key: str, fallback: int) -> int:
    value = document.get(key)
    return value if isinstance(value, int) and value > 0 else fallback
