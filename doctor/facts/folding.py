"""A large job's facts in the JSON form, folded so the report grows with what differs.

Ranks (their stage outcomes), identities (their fingerprints) and cluster nodes that are alike
are written once per group, with their own values as columns (facts/runs.py); node 0's ranks
and nodes and anything unlike its neighbours stay whole. Folding drops only what other facts
already hold or what no rule reads: a folded rank's stage seconds (its group keeps the median),
the identity, torch and sweep rows its stages carried (in the job's identities and node
bandwidth), a folded identity's pid. `unfold_*` gives back the long form, which the facts
decode from unchanged; lists shorter than FOLD_AT are never folded.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from ddp_doctor.facts.runs import (
    RunsError,
    decode_column,
    encode_column,
    number_ranges,
    parse_ranges,
)

FOLD_AT = 32

# How large a folded report is (bench/bench_scale.py measures it: 1,024 nodes x 8 ranks in two
# groups wrote ~0.1 MB): node 0's probes, findings and up to 64 KiB of job output; node 0's
# ranks whole; per node what does not fold (its sweep inside the node, a name that breaks a
# host list); per group of ranks, identities or nodes alike its template, columns,
# fingerprint and first node's probes.
REPORT_BASE_BYTES = 512 * 1024
WHOLE_RANK_BYTES = 4 * 1024
NODE_BYTES = 1024
GROUP_BYTES = 24 * 1024
# The largest report `diagnose` is sized for: 1,024 nodes x 8 ranks, with up to 128 groups.
SIZED_FOR_NODES, SIZED_FOR_RANKS_PER_NODE, SIZED_FOR_GROUPS = 1024, 8, 128


def folded_report_bytes(nodes: int, ranks_per_node: int, groups: int) -> int:
    """The most a folded report of this cluster takes, by the size model above."""
    return (
        REPORT_BASE_BYTES
        + ranks_per_node * WHOLE_RANK_BYTES
        + nodes * NODE_BYTES
        + groups * GROUP_BYTES
    )


STAGE_DATA_HELD_ELSEWHERE = frozenset(
    {"identity", "identities", "torch", "peer_access", "intra_node", "inter_node"}
)
RANK_COLUMNS = ("node_rank", "host")
IDENTITY_OWN = ("rank", "local_rank", "host", "device", "pci_bus_id", "cpu_affinity", "group_rank")
IDENTITY_DROPPED = ("pid",)
NODE_COLUMNS = ("host", "digest", "first_rank")

__all__ = ["RunsError", "fold_cluster", "fold_job", "unfold_cluster", "unfold_job"]


def _on_node_0(item: Mapping[str, Any], key: str) -> bool:
    return item.get(key) in (0, None)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _group(
    items: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


# -- ranks -------------------------------------------------------------------------------------
def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _rank_shape(rank: dict[str, Any]) -> dict[str, Any]:
    """What folded ranks share: each stage's outcome and its data that is not a scalar."""
    stages = []
    for stage in rank.get("stages") or []:
        data = {
            k: v
            for k, v in (stage.get("data") or {}).items()
            if k not in STAGE_DATA_HELD_ELSEWHERE and not _scalar(v)
        }
        stages.append(
            {"stage": stage["stage"], "ended": stage["ended"], "ok": stage["ok"], "data": data}
        )
    return {"stages": stages, "exit_code": rank.get("exit_code")}


def _rank_columns(members: list[dict[str, Any]]) -> dict[str, Any]:
    columns: dict[str, list[Any]] = {key: [m.get(key) for m in members] for key in RANK_COLUMNS}
    by_stages: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for member in members:  # ranks whose stage records are the same objects share columns
        by_stages.setdefault(tuple(map(id, member["stages"])), []).append(member)
    position = {key: index for index, key in enumerate(by_stages)}
    shared = _stage_columns([alike[0] for alike in by_stages.values()])
    keys = [position[tuple(map(id, member["stages"]))] for member in members]
    for key, values in shared.items():
        columns[key] = [values[index] for index in keys]
    return {key: encode_column(values) for key, values in columns.items()}


def _stage_columns(members: list[dict[str, Any]]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {}
    for index in range(len(members[0].get("stages") or [])):
        for field in ("error", "running_s"):
            values = [m["stages"][index].get(field) for m in members]
            if any(v is not None for v in values):
                columns[f"{index}.{field}"] = values
        keys = {k for m in members for k, v in (m["stages"][index].get("data") or {}).items()}
        for key in sorted(keys - STAGE_DATA_HELD_ELSEWHERE):
            values = [(m["stages"][index].get("data") or {}).get(key) for m in members]
            if all(_scalar(v) for v in values):
                columns[f"{index}.data.{key}"] = values
    return columns


def fold_job(job: dict[str, Any]) -> dict[str, Any]:
    """The job's JSON facts with ranks and identities folded (unchanged when short)."""
    ranks = list(job.get("ranks") or [])
    if len(ranks) < FOLD_AT or "rank_groups" in job:
        return job
    whole = [r for r in ranks if _on_node_0(r, "node_rank")]
    rest = [r for r in ranks if not _on_node_0(r, "node_rank")]
    groups = []
    shapes: dict[tuple[Any, ...], str] = {}  # by the identity of shared stage records

    def shape_of(rank: dict[str, Any]) -> str:
        key = (*map(id, rank.get("stages") or []), rank.get("exit_code"))
        if key not in shapes:
            shapes[key] = _canonical(_rank_shape(rank))
        return shapes[key]

    for members in _group(rest, shape_of).values():
        shape = _rank_shape(members[0])
        for index, stage in enumerate(shape["stages"]):
            seconds = [m["stages"][index].get("seconds") for m in members]
            known = [s for s in seconds if isinstance(s, (int, float))]
            stage["seconds"] = round(statistics.median(known), 6) if known else None
        groups.append(
            {
                "ranks": number_ranges(m["rank"] for m in members),
                **shape,
                "columns": _rank_columns(members),
            }
        )
    folded = {**job, "ranks": whole, "rank_groups": groups}
    return _fold_identities(folded)


def _fold_identities(job: dict[str, Any]) -> dict[str, Any]:
    if "identity_groups" in job:
        return job
    identities = list(job.get("identities") or [])
    whole = [i for i in identities if _on_node_0(i, "group_rank")]
    rest = [i for i in identities if not _on_node_0(i, "group_rank")]
    own = set(IDENTITY_OWN) | set(IDENTITY_DROPPED)
    groups = []
    for members in _group(
        rest, lambda i: _canonical({k: v for k, v in i.items() if k not in own})
    ).values():
        groups.append(
            {
                "ranks": number_ranges(m["rank"] for m in members),
                "fingerprint": {k: v for k, v in members[0].items() if k not in own},
                "columns": {
                    key: encode_column([m.get(key) for m in members])
                    for key in IDENTITY_OWN
                    if key != "rank"
                },
            }
        )
    return {**job, "identities": whole, "identity_groups": groups}


def unfold_job(job: Any) -> Any:
    """The long form of a folded job (RunsError where a folded part does not decode)."""
    if not isinstance(job, dict) or "rank_groups" not in job:
        return job
    ranks = list(job.get("ranks") or [])
    for group in _groups(job, "rank_groups"):
        ranks += _unfold_ranks(group)
    identities = list(job.get("identities") or [])
    for group in _groups(job, "identity_groups"):
        identities += _unfold_identities(group)
    unfolded = {k: v for k, v in job.items() if k not in ("rank_groups", "identity_groups")}
    return {
        **unfolded,
        "ranks": sorted(ranks, key=_number),
        "identities": sorted(identities, key=_number),
    }


def _number(item: Any) -> int:
    return (
        item.get("rank", 0) if isinstance(item, dict) and isinstance(item.get("rank"), int) else 0
    )


def _groups(document: dict[str, Any], key: str) -> list[dict[str, Any]]:
    groups = document.get(key) or []
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise RunsError(f"{key} is not a list of objects")
    return groups


def _columns(group: dict[str, Any], count: int) -> dict[str, list[Any]]:
    columns = group.get("columns") or {}
    if not isinstance(columns, dict):
        raise RunsError("columns is not an object")
    return {key: decode_column(spelled, count) for key, spelled in columns.items()}


def _unfold_ranks(group: dict[str, Any]) -> list[dict[str, Any]]:
    numbers = parse_ranges(group.get("ranks", ""))
    columns = _columns(group, len(numbers))
    stages = group.get("stages") or []
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise RunsError("stages is not a list of objects")
    ranks = []
    for row, number in enumerate(numbers):
        records = []
        for index, stage in enumerate(stages):
            prefix = f"{index}.data."
            data = dict(stage.get("data") or {})
            data.update(
                {k[len(prefix) :]: v[row] for k, v in columns.items() if k.startswith(prefix)}
            )
            records.append(
                {
                    **stage,
                    "data": data,
                    "error": (columns.get(f"{index}.error") or [None] * len(numbers))[row],
                    "running_s": (columns.get(f"{index}.running_s") or [None] * len(numbers))[row],
                }
            )
        rank = {"rank": number, "stages": records, "exit_code": group.get("exit_code")}
        rank.update({key: columns[key][row] for key in RANK_COLUMNS if key in columns})
        ranks.append(rank)
    return ranks


def _unfold_identities(group: dict[str, Any]) -> list[dict[str, Any]]:
    numbers = parse_ranges(group.get("ranks", ""))
    columns = _columns(group, len(numbers))
    fingerprint = group.get("fingerprint") or {}
    if not isinstance(fingerprint, dict):
        raise RunsError("fingerprint is not an object")
    return [
        {**fingerprint, "rank": number, **{k: v[row] for k, v in columns.items()}, "pid": None}
        for row, number in enumerate(numbers)
    ]


# -- cluster nodes -----------------------------------------------------------------------------
def _node_shape(node: dict[str, Any]) -> str:
    ranks = node.get("ranks") or []
    return _canonical(
        {
            "reported": node.get("reported"),
            "applied_fixes": node.get("applied_fixes"),
            "link": node.get("link"),
            "ranks": len(ranks),
        }
    )


def _regular(node: dict[str, Any]) -> bool:
    ranks = node.get("ranks") or []
    contiguous = ranks == list(range(ranks[0], ranks[0] + len(ranks))) if ranks else True
    return contiguous and not node.get("probes") and not _on_node_0(node, "node_rank")


def fold_cluster(cluster: dict[str, Any]) -> dict[str, Any]:
    nodes = list(cluster.get("nodes") or [])
    if len(nodes) < FOLD_AT or "node_runs" in cluster:
        return cluster
    whole = [n for n in nodes if not _regular(n)]
    runs = []
    for members in _group([n for n in nodes if _regular(n)], _node_shape).values():
        first = members[0]
        values = {
            "host": [m.get("host") for m in members],
            "digest": [m.get("digest") for m in members],
            "first_rank": [(m.get("ranks") or [None])[0] for m in members],
        }
        runs.append(
            {
                "nodes": number_ranges(m["node_rank"] for m in members),
                "reported": first.get("reported"),
                "applied_fixes": first.get("applied_fixes") or {},
                "link": first.get("link"),
                "ranks_per_node": len(first.get("ranks") or []),
                "columns": {key: encode_column(v) for key, v in values.items()},
            }
        )
    groups = [_fold_node_group(g) for g in cluster.get("groups") or []]
    return {**cluster, "nodes": whole, "node_runs": runs, "groups": groups}


def _fold_node_group(group: dict[str, Any]) -> dict[str, Any]:
    return {
        **group,
        "nodes": number_ranges(group.get("nodes") or []),
        "hosts": encode_column(list(group.get("hosts") or [])),
    }


def unfold_cluster(cluster: Any) -> Any:
    if not isinstance(cluster, dict) or "node_runs" not in cluster:
        return cluster
    nodes = list(cluster.get("nodes") or [])
    for run in _groups(cluster, "node_runs"):
        numbers = parse_ranges(run.get("nodes", ""))
        columns = _columns(run, len(numbers))
        per_node = run.get("ranks_per_node")
        if type(per_node) is not int or per_node < 0:
            raise RunsError("ranks_per_node is not a count")
        for row, number in enumerate(numbers):
            first = columns.get("first_rank", [None] * len(numbers))[row]
            ranks = list(range(first, first + per_node)) if type(first) is int else []
            nodes.append(
                {
                    "node_rank": number,
                    "host": columns.get("host", [None] * len(numbers))[row],
                    "ranks": ranks,
                    "reported": run.get("reported"),
                    "applied_fixes": run.get("applied_fixes") or {},
                    "link": run.get("link") if isinstance(run.get("link"), dict) else None,
                    "probes": [],
                    "digest": columns.get("digest", [None] * len(numbers))[row],
                }
            )
    groups = []
    for group in _groups(cluster, "groups"):
        numbers = (
            parse_ranges(group.get("nodes", ""))
            if isinstance(group.get("nodes"), str)
            else group.get("nodes")
        )
        hosts = group.get("hosts")
        if not isinstance(hosts, list):
            hosts = decode_column(hosts, len(numbers or []))
        groups.append({**group, "nodes": numbers, "hosts": hosts})
    unfolded = {k: v for k, v in cluster.items() if k != "node_runs"}
    key = lambda n: n.get("node_rank", 0) if isinstance(n, dict) else 0  # noqa: E731
    return {**unfolded, "nodes": sorted(nodes, key=key), "groups": groups}


# -- a report's probes -------------------------------------------------------------------------
FOLDS = {"job": (fold_job, unfold_job), "cluster": (fold_cluster, unfold_cluster)}


def fold_probes(probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each probe's JSON entry with its facts folded where they fold (job, cluster)."""
    return [_refolded(probe, 0) for probe in probes]


def unfold_probes(probes: Any) -> Any:
    """The cluster's long form; a folded job stays folded for job_facts_of."""
    if not isinstance(probes, list):
        return probes
    return [
        _refolded(probe, 1)
        if isinstance(probe, dict) and probe.get("probe") == "cluster"
        else probe
        for probe in probes
    ]


def _refolded(probe: Any, way: int) -> Any:
    if not isinstance(probe, dict) or probe.get("probe") not in FOLDS:
        return probe
    facts = probe.get("facts")
    if not isinstance(facts, dict):
        return probe
    return {**probe, "facts": FOLDS[probe["probe"]][way](facts)}


# -- straight to facts: a folded job decoded without building every rank's JSON ---------------
def job_facts_of(facts: dict[str, Any], decode: Callable[[type, Any], Any]) -> Any:
    """JobFacts from a folded job's JSON: the whole part through `decode` (codec.from_jsonable),
    each group's ranks and identities built from its decoded template, shared where alike."""
    from dataclasses import replace

    from ddp_doctor.facts.job import Identity, JobFacts, RankFacts, StageRecord

    rest = {k: v for k, v in facts.items() if k not in ("rank_groups", "identity_groups")}
    job = decode(JobFacts, rest)
    ranks = list(job.ranks)
    for group in _groups(facts, "rank_groups"):
        numbers = parse_ranges(group.get("ranks", ""))
        columns = _columns(group, len(numbers))
        stage_columns = {k: v for k, v in columns.items() if k not in RANK_COLUMNS}
        built: dict[str, tuple[StageRecord, ...]] = {}
        for row, number in enumerate(numbers):
            key = _canonical([v[row] for v in stage_columns.values()])
            if key not in built:
                one = _unfold_ranks({**group, "ranks": str(number), "columns": _row(columns, row)})
                built[key] = decode(RankFacts, one[0]).stages
            own = _checked({k: columns[k][row] for k in RANK_COLUMNS if k in columns})
            ranks.append(RankFacts(number, built[key], _exit(group), **own))
    identities = list(job.identities)
    for group in _groups(facts, "identity_groups"):
        numbers = parse_ranges(group.get("ranks", ""))
        columns = _columns(group, len(numbers))
        base = decode(
            Identity, _unfold_identities({**group, "ranks": "0", "columns": _row(columns, 0)})[0]
        )
        for row, number in enumerate(numbers):
            own = {k: v[row] for k, v in columns.items() if k in OWN_TYPES}
            identities.append(replace(base, rank=number, **_checked(own)))
    return replace(
        job,
        ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
        identities=tuple(sorted(identities, key=lambda i: i.rank)),
    )


def _row(columns: dict[str, list[Any]], row: int) -> dict[str, Any]:
    return {key: {"all": values[row]} for key, values in columns.items()}


def _exit(group: dict[str, Any]) -> int | None:
    code = group.get("exit_code")
    if code is not None and type(code) is not int:
        raise RunsError("exit_code is not an integer")
    return code


OWN_TYPES: dict[str, tuple[type, ...]] = {
    "local_rank": (int,), "group_rank": (int, type(None)), "node_rank": (int, type(None)),
    "host": (str, type(None)), "device": (str,), "pci_bus_id": (str, type(None)),
    "cpu_affinity": (str, type(None)),
}  # fmt: skip


def _checked(own: dict[str, Any]) -> dict[str, Any]:
    """A folded rank's own values, of the types its facts take (what the codec would check)."""
    for key, value in own.items():
        if type(value) not in OWN_TYPES[key]:
            raise RunsError(f"{key} {value!r} is not a {OWN_TYPES[key][0].__name__}")
    return own


def job_to_json(job: Any) -> dict[str, Any]:
    """A JobFacts as its folded JSON, without the generic codec's walk over every rank."""
    from dataclasses import replace

    from ddp_doctor.codec import to_jsonable

    if len(job.ranks) < FOLD_AT:
        return to_jsonable(job)
    document = to_jsonable(replace(job, ranks=(), identities=()))
    seen: dict[int, dict[str, Any]] = {}  # records shared between ranks are written once
    document["ranks"] = [_rank_json(rank, seen) for rank in job.ranks]
    document["identities"], document["identity_groups"] = _folded_identities(job.identities)
    return fold_job(document)


def _folded_identities(identities: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Identities as _fold_identities writes them, grouped from the objects themselves (the
    values ranks alike share are often the same objects: looked at once)."""
    from ddp_doctor.codec import _field_names

    names = _field_names(type(identities[0])) if identities else ()
    shared = [n for n in names or () if n not in IDENTITY_OWN and n not in IDENTITY_DROPPED]
    whole = [_identity_json(i) for i in identities if i.group_rank in (0, None)]
    seen: dict[int, Any] = {}

    def hashable(value: Any) -> Any:
        if isinstance(value, (str, int, float, bool, type(None))):
            return value
        if id(value) not in seen:
            seen[id(value)] = (value, _canonical(_plain(value)))
        return seen[id(value)][1]

    groups: dict[tuple[Any, ...], list[Any]] = {}
    for identity in identities:
        if identity.group_rank not in (0, None):
            key = tuple(hashable(getattr(identity, n)) for n in shared)
            groups.setdefault(key, []).append(identity)
    folded = [
        {
            "ranks": number_ranges(m.rank for m in members),
            "fingerprint": {n: _plain(getattr(members[0], n)) for n in shared},
            "columns": {
                key: encode_column([getattr(m, key) for m in members])
                for key in IDENTITY_OWN
                if key != "rank"
            },
        }
        for members in groups.values()
    ]
    return whole, folded


def _rank_json(rank: Any, seen: dict[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        "rank": rank.rank,
        "stages": [seen.get(id(s)) or seen.setdefault(id(s), _stage_json(s)) for s in rank.stages],
        "exit_code": rank.exit_code,
        "node_rank": rank.node_rank,
        "host": rank.host,
    }  # fmt: skip


def _stage_json(s: Any) -> dict[str, Any]:
    return {
        "stage": s.stage, "ended": s.ended, "ok": s.ok, "seconds": s.seconds,
        "error": s.error, "data": _plain(s.data), "running_s": s.running_s,
    }  # fmt: skip


def _identity_json(identity: Any) -> dict[str, Any]:
    from ddp_doctor.codec import _field_names

    return {name: _plain(getattr(identity, name)) for name in _field_names(type(identity)) or ()}


PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind in PLAIN:
        return value
    if kind is dict:
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
