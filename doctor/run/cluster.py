"""`run` as one node of several: the network preflight, the fixes it predicts, the job on
torchrun's own rendezvous, and node 0's verdict through the job's store.

Every node runs the same steps. The preflight waits (bounded) for the master's port on the
nodes that are not the master; predicted failures whose fix is a variable are fixed in the
job's environment (unless --as-is), so the findings can say whether the fix worked. The node
that runs rank 0 judges the whole cluster while the ranks still hold the store, and its
verdict travels back to every node, so each node's exit code follows the cluster's.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

from ddp_doctor.engine import Probe, run_probe
from ddp_doctor.facts.cluster import C10D, ClusterFacts, NetworkFacts, NodePlan
from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import EnvFacts, PlanFacts, TorchFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.job.nccl_conf import nccl_conf_variables
from ddp_doctor.progress import Progress
from ddp_doctor.readings.nccl_debug import doctor_nccl_env, logging_owner
from ddp_doctor.readings.netfix import fixes, nccl_possible, predict
from ddp_doctor.registry import Selector

RENDEZVOUS_SHARE = 0.5  # of --timeout: how long nodes wait for each other
ISOLATE_SHARE, MIN_ISOLATE_S = 0.4, 10.0  # of --timeout: the pair tests of --isolate
MIN_RENDEZVOUS_S = 10.0
JOB_GRACE_S = 10.0


def rendezvous_wait(timeout_s: float) -> float:
    return max(MIN_RENDEZVOUS_S, timeout_s * RENDEZVOUS_SHARE)


def network_probe(nodes: NodePlan, timeout_s: float, progress: Progress) -> Probe:
    wait = rendezvous_wait(timeout_s)

    def measure() -> NetworkFacts:
        from ddp_doctor.probes.network import collect_network

        return collect_network(nodes, wait, progress.say)

    return Probe("network", measure, wait + 15)


def cluster_job(
    plan: PlanFacts,
    python: str,
    gpus: int,
    results: list[ProbeResult],
    torch: TorchFacts | None,
    left: float,
    progress: Progress,
    selector: Selector | None,
) -> list[ProbeResult]:
    """This node's job and the cluster as far as this node knows it."""
    from ddp_doctor.codec import to_jsonable
    from ddp_doctor.probes.base import ProbeFailed
    from ddp_doctor.probes.job.exchange import ClusterExchange
    from ddp_doctor.probes.job.launch import preflight, run_job
    from ddp_doctor.probes.job.links import node_link
    from ddp_doctor.registry import rules_judged
    from ddp_doctor.report_io import probe_to_json

    assert plan.nodes is not None
    rules_judged("facts")  # loaded now: node 0 judges while every rank waits for the verdict
    network = _facts(results, "network")
    config = _job_config(plan, gpus, left, python, network, _facts(results, "env") or EnvFacts())
    nccl_missing = plan.backend == "nccl" and torch is not None and not torch.nccl_available
    checks = preflight(config, nccl_missing, master_unreachable=_unreachable(network))
    from ddp_doctor.run.node_groups import node_digest

    host = socket.gethostname()
    probes = [probe_to_json(result) for result in results]
    node_document = {
        "node_rank": plan.nodes.node_rank,
        "host": host,
        "applied_fixes": dict(config.extra_env),
        "doctor_env": dict(config.doctor_env),
        "link": to_jsonable(node_link(network.route_interface if network else None)),
        "digest": node_digest(probes),  # the node's facts travel to node 0 once per digest
        "probes": probes,
    }
    decide = _decider(results, JobFacts(**_snapshot(config, checks)), selector, host)
    store_port = config.master_port if config.rendezvous and config.rendezvous.is_host else None
    exchange = ClusterExchange(node_document, decide, store_port)

    def measure() -> JobFacts:
        facts = run_job(config, checks, progress.say, exchange=exchange)
        if not facts.launched:  # a failed probe with its preflight facts, never an ok one
            raise ProbeFailed(f"not launched: {facts.not_launched_reason}", facts)
        return facts

    job_result = run_probe(Probe("job", measure, left + JOB_GRACE_S))
    return _after_job(job_result, exchange, plan.nodes)


def _job_config(
    plan: PlanFacts,
    gpus: int,
    left: float,
    python: str,
    network: NetworkFacts | None,
    env: EnvFacts,
) -> Any:
    """One node's job: its rendezvous, the fixes the preflight predicts (unless --as-is), and
    NCCL's INFO lines asked for where NCCL may run between the nodes (readings/nccl_debug.py)."""
    from ddp_doctor.run import jobplan

    assert plan.nodes is not None
    nccl = nccl_possible(gpus, plan.backend)
    predicted = predict(network, env.variables, nccl) if network else []
    base = jobplan.job_config(plan, gpus, left, python)
    across = nccl and plan.nodes.nnodes > 1
    conf = nccl_conf_variables() if across else {}
    return dataclasses.replace(
        base,
        rendezvous=_rendezvous(plan.nodes, network, plan.timeout_s or left),
        extra_env={} if plan.as_is else fixes(predicted),
        exchange_timeout_s=base.init_timeout_s,
        isolate_s=isolate_budget(plan.timeout_s or left) if plan.nodes.isolate else 0.0,
        isolate_slow_below=plan.nodes.isolate_slow_below,
        doctor_env=doctor_nccl_env(env.variables, across, conf),
        nccl_logging=logging_owner(env.variables, conf) if across else None,
    )


def isolate_budget(timeout_s: float) -> float:
    return max(MIN_ISOLATE_S, timeout_s * ISOLATE_SHARE)


def _snapshot(config: Any, checks: Any) -> dict[str, Any]:
    """The job's facts while it still runs (no exit code yet)."""
    from ddp_doctor.probes.job.launch import planned_facts

    return {**planned_facts(config, checks), "launched": True}


def _decider(
    results: list[ProbeResult], snapshot: JobFacts, selector: Selector | None, host: str
) -> Any:
    """Node 0's judgement of rank 0's cluster.json: the verdict every node receives."""

    def decide(document: Any) -> dict[str, Any]:
        from ddp_doctor.run.cluster_view import verdict_document

        _, findings = judge_cluster(results, snapshot, document, selector)
        return verdict_document(findings, host)

    return decide


def judge_cluster(
    results: list[ProbeResult],
    snapshot: JobFacts,
    document: Any,
    selector: Selector | None = None,
) -> tuple[list[ProbeResult], list[Any]]:
    """Node 0's probes with the whole job and cluster as rank 0 gathered them, and their
    findings."""
    from ddp_doctor.run.cluster_view import whole_cluster, whole_job

    job = whole_job(snapshot, document)
    cluster = whole_cluster(job, document, node_rank=0)
    probes = _with_cluster(results, job, cluster)
    return probes, judge(probes, selector)


def _after_job(job_result: ProbeResult, exchange: Any, nodes: NodePlan) -> list[ProbeResult]:
    from ddp_doctor.run.cluster_view import member_cluster, whole_cluster, whole_job

    job: JobFacts | None = job_result.facts
    if job is None:
        return [job_result]
    own_node = next((r.node_rank for r in job.ranks if r.node_rank is not None), nodes.node_rank)
    runs_rank_0 = any(rank.rank == 0 and rank.stages for rank in job.ranks)
    document = exchange.cluster_document
    if document is not None:
        job = whole_job(job, document)
        cluster = whole_cluster(job, document, node_rank=own_node or 0)
        job_result = dataclasses.replace(job_result, facts=job)
    elif runs_rank_0:
        cluster = ClusterFacts(nnodes=nodes.nnodes, node_rank=own_node, whole=True)
    else:
        cluster = member_cluster(nodes.nnodes, own_node, exchange.verdict)
    return [job_result, ProbeResult("cluster", ProbeStatus.OK, cluster, 0.0)]


def _with_cluster(
    results: list[ProbeResult], job: JobFacts, cluster: ClusterFacts
) -> list[ProbeResult]:
    from ddp_doctor.run.jobplan import torch_from_job

    judged = [*results, ProbeResult("job", ProbeStatus.OK, job, 0.0)]
    if not any(r.probe == "torch" for r in results):
        judged += [r for r in [torch_from_job(judged)] if r is not None]
    return [*judged, ProbeResult("cluster", ProbeStatus.OK, cluster, 0.0)]


def _rendezvous(nodes: NodePlan, network: NetworkFacts | None, timeout_s: float) -> Any:
    from ddp_doctor.probes.job.rendezvous import Rendezvous

    waited = network.port.waited_s if network and network.port else 0.0
    local = network.master_is_local if network else False
    return Rendezvous(
        kind=nodes.rendezvous,
        nnodes=nodes.nnodes,
        min_nodes=nodes.min_nodes,
        host=nodes.master_addr,
        port=nodes.master_port,
        run_id=nodes.rdzv_id,
        wait_s=max(MIN_RENDEZVOUS_S, rendezvous_wait(timeout_s) - waited),
        node_rank=nodes.node_rank,
        is_host=local if nodes.rendezvous == C10D else nodes.node_rank == 0,
        local_addr=network.route_address if network and nodes.rendezvous == C10D else None,
    )


def _unreachable(network: NetworkFacts | None) -> str | None:
    port = network.port if network else None
    if port is None or port.outcome == "answered" or network is None:
        return None
    return (
        f"the master {network.master_addr}:{network.master_port} never answered "
        f"({port.outcome} for {port.waited_s:.0f} s)"
    )


def _facts(results: list[ProbeResult], probe: str) -> Any:
    return next((r.facts for r in results if r.probe == probe), None)
