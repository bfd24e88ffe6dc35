"""Node 0's report on the whole cluster and the other nodes' own part, from recorded two-node
runs (fixtures/jobs/multinode-*); and the multi-node flags of `run` on the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fakes import collect_torch_returning, fake_nvml_module

from ddp_doctor.facts.job import JobFacts, Preflight
from ddp_doctor.judge import judge
from ddp_doctor.model import Severity, make_report
from ddp_doctor.probes import torch_info
from ddp_doctor.render import render
from ddp_doctor.render.table import render_table
from ddp_doctor.report_io import report_from_json
from ddp_doctor.run.cluster_view import member_cluster, whole_cluster, whole_job

JOBS = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"


def saved(name: str) -> Any:
    return report_from_json(json.loads((JOBS / f"{name}.json").read_text()))


def findings(name: str, code: str) -> list:
    return [f for f in judge(saved(name).probes) if f.code == code]


def test_a_problem_every_node_shares_is_reported_once_naming_them() -> None:
    (nccl,) = findings("multinode-healthy-node0", "DDP005")
    assert nccl.evidence["nodes"] == [0, 1]


def test_another_nodes_problem_is_reported_under_its_name_with_its_fix_checked() -> None:
    (wrong,) = findings("multinode-gloo-ifname-node0", "DDP205")
    assert wrong.evidence["nodes"] == [1] and wrong.message.startswith("node 1 (node1): ")
    assert wrong.evidence["fix_verified"] is True


def test_what_the_whole_job_shows_is_judged_once() -> None:
    (skew,) = [f for f in findings("multinode-torch-skew-node0", "DDP306")]
    assert "nodes" not in skew.evidence
    assert skew.evidence["per_host"] == {"node0": "2.13.0+cpu", "node1": "2.12.0"}


def test_node_0_prints_every_node_and_the_bandwidth_across_nodes() -> None:
    report = saved("multinode-healthy-node0")
    text = render_table(make_report(report.probes, judge(report.probes)), colour=False)
    assert "node0" in text and "node1" in text
    assert "across nodes" in text and "slowest node: node " in text
    markdown = render(make_report(report.probes, []), "markdown")
    assert "### Cluster" in markdown


def test_the_other_nodes_point_to_node_0() -> None:
    report = saved("multinode-healthy-node1")
    text = render_table(make_report(report.probes, judge(report.probes)), colour=False)
    assert "node 0 (node0) prints the whole cluster's report" in text


def test_every_nodes_host_is_redacted_on_request() -> None:
    report = saved("multinode-healthy-node0")
    shared = render(make_report(report.probes, []), "json", redact_hosts=True)
    assert not [v for v in strings(json.loads(shared)) if "node0" in v or "node1" in v]


def strings(value: Any) -> list[str]:
    """Every string value in a JSON document (not its keys)."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def test_the_verdict_sets_the_other_nodes_severity() -> None:
    verdict = {
        "host": "node0",
        "findings": [
            {"code": "DDP306", "severity": "error", "message": "x"},
            {"code": "DDP005", "severity": "info", "message": "y"},
        ],
    }
    cluster = member_cluster(2, 1, verdict)
    assert cluster.verdict_received and cluster.node0_host == "node0"
    report = saved("multinode-healthy-node1")
    probes = [p for p in report.probes if p.probe != "cluster"]
    from ddp_doctor.model import ProbeResult, ProbeStatus

    judged = judge([*probes, ProbeResult("cluster", ProbeStatus.OK, cluster, 0.0)])
    (problems,) = [f for f in judged if f.code == "DDP217"]
    assert problems.severity is Severity.ERROR
    assert problems.evidence["codes"] == ["DDP306", "DDP005"]
    assert not member_cluster(2, 1, None).verdict_received


def test_the_whole_job_fills_in_ranks_that_never_reported() -> None:
    local = JobFacts(launched=True, preflight=Preflight("node0"), nproc=1, nnodes=2)
    placed = {"event": "placement", "rank": 0, "group_rank": 0, "host": "node0"}
    document = {
        "world_size": 2,
        "group_world_size": 2,
        "journals": {"0": {"records": [placed]}},
        "nodes": {"0": {"host": "node0", "probes": [], "applied_fixes": {"X": "1"}}},
    }
    job = whole_job(local, document)
    assert [(r.rank, r.node_rank) for r in job.ranks] == [(0, 0), (1, None)]
    cluster = whole_cluster(job, document, node_rank=0)
    assert [(n.node_rank, n.host, n.reported) for n in cluster.nodes] == [
        (0, "node0", True),
        (1, None, False),
    ]
    assert cluster.missing_ranks == (1,) and cluster.nodes[0].applied_fixes == {"X": "1"}


# --- the command line -----------------------------------------------------------------------
@pytest.fixture
def quick(invoke: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(torch_info, "collect_torch", collect_torch_returning())
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml_module(init_error=12))

    def run(*args: str, **kwargs: Any) -> Result:
        return invoke("run", "--no-jobs", "--format", "json", *args, **kwargs)

    return run


@pytest.mark.parametrize(
    "args",
    [
        ["--nnodes", "2"],
        ["--nnodes", "2", "--node-rank", "0", "--master-addr", "h"],
        ["--node-rank", "1"],
        ["--nnodes", "1:2", "--node-rank", "0", "--master-addr", "h", "--master-port", "1"],
        ["--nnodes", "2", "--rdzv-endpoint", "h:1", "--master-addr", "h"],
    ],
)
def test_incomplete_multinode_flags_are_one_line_usage_errors(quick: Any, args: list[str]) -> None:
    result = quick(*args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("ddp-doctor: error:")]
    assert result.stdout == ""


def test_the_plan_and_its_sources_are_in_the_report(quick: Any) -> None:
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }
    result = quick(env=env)
    assert result.exit_code == 0, result.output
    plan = next(p for p in json.loads(result.stdout)["probes"] if p["probe"] == "plan")["facts"]
    nodes = plan["nodes"]
    assert (nodes["node_rank"], nodes["master_addr"], nodes["hosts"]) == (1, "n1", ["n1", "n2"])
    assert nodes["sources"]["node_rank"] == "SLURM_NODEID"


def test_a_second_slurm_task_on_a_node_is_refused(quick: Any) -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_LOCALID": "1"}
    result = quick(env=env)
    assert result.exit_code == 2 and "ntasks-per-node=1" in result.stderr
