"""A cluster report that grows with what differs: compact spellings (facts/runs.py), the
fold of a large job's JSON (facts/folding.py), fingerprints sent once per digest through a
real TCPStore (patient/cluster_share.py), nodes grouped on node 0 (run/node_groups.py), and a
1,024-node report that renders under GitHub's limit and reads back for `diagnose`."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ddp_doctor.codec import to_jsonable
from ddp_doctor.facts.folding import FOLD_AT, fold_cluster, fold_job, unfold_cluster, unfold_job
from ddp_doctor.facts.runs import (
    RunsError,
    decode_column,
    encode_column,
    expand_host_list,
    host_list,
    number_ranges,
    parse_ranges,
)
from ddp_doctor.model import make_report
from ddp_doctor.render import render
from ddp_doctor.report_io import MAX_REPORT_BYTES, load_report, report_from_json, report_to_json

BENCH = Path(__file__).resolve().parent.parent / "bench"
GITHUB_ISSUE_CHARS = 65_536


def test_number_ranges_round_trip() -> None:
    assert number_ranges([5, 0, 1, 2, 3, 9, 10]) == "0-3,5,9-10"
    assert parse_ranges("0-3,5,9-10") == [0, 1, 2, 3, 5, 9, 10]
    assert number_ranges([]) == "" and parse_ranges("") == []
    for bad in ("3-1", "a", "1-b", "0-99999999999"):
        with pytest.raises(RunsError):
            parse_ranges(bad)


def test_host_lists_as_slurm_writes_them() -> None:
    hosts = [f"node-{n:04d}" for n in range(1024) if n != 417]
    spelled = host_list(hosts)
    assert spelled == "node-[0000-0416,0418-1023]"
    assert expand_host_list(spelled) == hosts
    assert host_list(["a", "gpu7", "gpu8", "b"]) == "a,gpu[7-8],b"
    assert expand_host_list("a,gpu[7-8],b") == ["a", "gpu7", "gpu8", "b"]


@pytest.mark.parametrize(
    "values",
    [
        [7] * 100,
        [n // 8 for n in range(800)],
        [f"cuda:{n % 8}" for n in range(800)],
        [f"node{n // 8:03d}" for n in range(800)],
        [n // 8 for n in range(800) if n // 8 != 41],  # a node left out: two strides
        [3, 1, 2, 9],
    ],
)
def test_columns_decode_to_what_was_encoded(values: list[Any]) -> None:
    spelled = encode_column(values)
    assert decode_column(json.loads(json.dumps(spelled)), len(values)) == values
    if len(values) > 10:
        assert len(json.dumps(spelled)) < 200  # a pattern, not the list


def test_a_column_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(RunsError):
        decode_column([1, 2], 3)
    with pytest.raises(RunsError):
        decode_column({"hosts": "n[0-3]", "repeat": 2}, 7)


# -- a simulated 1,024 x 8 cluster, through the real exchange and judging ----------------------
@pytest.fixture(scope="module")
def bench() -> Any:
    sys.path.insert(0, str(BENCH))
    import bench_scale

    yield bench_scale
    sys.path.remove(str(BENCH))


def cluster_document(bench: Any, nodes: int, per_node: int, store: Any) -> dict[str, Any]:
    from ddp_doctor.patient import cluster_share

    folder_text = {n: json.dumps(bench.node_document(n)) for n in range(nodes)}
    world = nodes * per_node
    for rank in range(world):
        node, local = divmod(rank, per_node)
        records = bench.rank_records(rank, node, local, nodes, per_node)
        placement = {k: v for k, v in records[0].items() if k != "event"}
        cluster_share.post(store, placement, records, folder_text[node] if local == 0 else None)
    return store


def gathered(bench: Any, nodes: int, per_node: int, tmp_path: Path) -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    from ddp_doctor.patient import cluster_share

    store = torch.distributed.TCPStore(
        "127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30), wait_for_workers=False
    )
    cluster_document(bench, nodes, per_node, store)
    placement = {"rank": 0, "world_size": nodes * per_node, "group_world_size": nodes}
    cluster_share.gather(store, placement, tmp_path, 5.0)
    return json.loads((tmp_path / "cluster.json").read_text())


def node0_report(bench: Any, document: dict[str, Any], nodes: int, per_node: int) -> Any:
    import dataclasses

    from ddp_doctor.report_io import probe_from_json
    from ddp_doctor.run.cluster import judge_cluster

    results = [probe_from_json(p) for p in bench._planned(bench.node_document(0)["probes"], nodes)]
    job_entry = next(p for p in bench._template()["probes"] if p["probe"] == "job")
    snapshot = dataclasses.replace(
        probe_from_json(job_entry).facts, nnodes=nodes, nproc=per_node, ranks=()
    )
    probes, findings = judge_cluster(results, snapshot, document)
    return make_report(probes, findings)


def test_only_new_digests_send_the_whole(bench: Any, tmp_path: Path) -> None:
    document = gathered(bench, 64, 2, tmp_path)
    assert len(document["journals"]) == 128 and len(document["nodes"]) == 64
    assert len(document["fingerprints"]) == 2  # NCCL 2.28.9 everywhere but one node
    assert len(document["node_facts"]) == 1  # nodes alike apart from their names
    identity = document["journals"]["5"]["records"][4]["data"]["identity"]
    assert "torch_version" not in identity and identity["fingerprint"] in document["fingerprints"]


def test_node_0_groups_identical_nodes_and_names_the_odd_one(bench: Any, tmp_path: Path) -> None:
    report = node0_report(bench, gathered(bench, 64, 2, tmp_path), 64, 2)
    cluster = next(p.facts for p in report.probes if p.probe == "cluster")
    assert [len(g.nodes) for g in cluster.groups] == [63, 1]
    assert cluster.groups[1].nodes == (63,) and cluster.groups[1].differs == {"NCCL": "2.21.5"}
    skew = next(f for f in report.findings if f.code == "DDP306")
    assert skew.evidence["per_value"]["2.21.5"] == {"hosts": "node-0063", "on_ranks": "126, 127"}


def test_the_folded_report_reads_back_to_the_same_facts(bench: Any, tmp_path: Path) -> None:
    report = node0_report(bench, gathered(bench, 64, 2, tmp_path), 64, 2)
    written = json.loads(json.dumps(to_jsonable(report_to_json(report))))
    job = next(p["facts"] for p in written["probes"] if p["probe"] == "job")
    assert len(job["ranks"]) == 2 and job["rank_groups"]  # node 0's ranks whole, the rest folded
    back = report_from_json(written)
    for name in ("job", "cluster"):
        before = next(p.facts for p in report.probes if p.probe == name)
        after = next(p.facts for p in back.probes if p.probe == name)
        if name == "job":  # what folding drops: pids and the stage seconds of folded ranks
            assert [r.rank for r in after.ranks] == [r.rank for r in before.ranks]
            assert [i.device for i in after.identities] == [i.device for i in before.identities]
            assert [i.nccl_version for i in after.identities] == [
                i.nccl_version for i in before.identities
            ]
            assert [r.host for r in after.ranks] == [r.host for r in before.ranks]
        else:
            assert after == before


def test_short_lists_are_never_folded() -> None:
    job = {"ranks": [{"rank": r, "stages": [], "node_rank": 1} for r in range(FOLD_AT - 1)]}
    assert fold_job(job) is job and unfold_job(job) is job
    cluster = {"nodes": [{"node_rank": n, "ranks": [n]} for n in range(3)]}
    assert fold_cluster(cluster) is cluster and unfold_cluster(cluster) is cluster


def test_a_broken_fold_is_a_malformed_report() -> None:
    from ddp_doctor.report_io import ReportError

    broken = {
        "schema_version": 1,
        "probes": [
            {
                "probe": "job",
                "status": "ok",
                "duration_s": 0,
                "facts": {"launched": True, "rank_groups": [{"ranks": "9-1"}]},
            }
        ],
        "findings": [],
    }
    with pytest.raises(ReportError):
        report_from_json(broken)


@pytest.mark.slow
def test_1024_nodes_render_under_the_issue_limit_and_read_back(bench: Any, tmp_path: Path) -> None:
    report = node0_report(bench, gathered(bench, 1024, 8, tmp_path), 1024, 8)
    markdown = render(report, "markdown")
    assert len(markdown) < GITHUB_ISSUE_CHARS
    assert "1,023 nodes identical" in markdown and "node-0417 differs: NCCL 2.21.5" in markdown
    text = render(report, "json")
    assert len(text.encode()) < MAX_REPORT_BYTES
    path = tmp_path / "report.json"
    path.write_text(text)
    back = load_report(path)
    assert len(next(p.facts for p in back.probes if p.probe == "job").ranks) == 8192


def test_markdown_stays_under_the_issue_limit_when_every_node_differs() -> None:
    from ddp_doctor.facts.cluster import ClusterFacts, ClusterNode, NodeGroup
    from ddp_doctor.model import ProbeResult, ProbeStatus

    nodes = 4096
    cluster = ClusterFacts(
        nnodes=nodes,
        node_rank=0,
        whole=True,
        nodes=tuple(
            ClusterNode(n, f"host-{n * 7919 % 100003}-x", (n,), reported=n % 3 != 0)
            for n in range(nodes)
        ),
        groups=tuple(
            NodeGroup((n,), (f"host-{n}",), {"torch": "2.13.0"}, {"NCCL_ALGO": "x" * 500})
            for n in range(nodes)
        ),
    )
    report = make_report([ProbeResult("cluster", ProbeStatus.OK, cluster, 0.0)], [])
    assert len(render(report, "markdown")) < GITHUB_ISSUE_CHARS
