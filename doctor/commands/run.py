"""`run`: probe this machine, launch the job, judge, print. One node of several takes the
flags torchrun takes (or SLURM's / Kubeflow's variables) and meets the others on torchrun's
own rendezvous (nodeplan.py, cluster_run.py)."""

from __future__ import annotations

import click

from ddp_doctor.cli import ReportOptions, finish, report_options
from ddp_doctor.facts.cluster import NodePlan
from ddp_doctor.facts.machine import PlanFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus, make_report
from ddp_doctor.progress import Progress
from ddp_doctor.registry import Selector
from ddp_doctor.run.checkup import collect
from ddp_doctor.run.nodeplan import LaunchFlags
from ddp_doctor.trust.numbers import MAX_TIMEOUT_S, FiniteFloat

DEFAULT_MASTER_ADDR = "127.0.0.1"
MAX_BUSBW_GBPS = 100000.0  # 100 TB/s; NVLink 5 is 1.8 TB/s
MAX_SIZE_BYTES = 64 * 1024**3  # one all-reduce buffer per rank; nccl-tests stops at 8-16 GiB
MAX_SIZES = 64


@click.command("run")
@report_options()
@click.option(
    "--timeout",
    type=FiniteFloat(1.0, MAX_TIMEOUT_S),
    default=120.0,
    show_default=True,
    help="Upper bound in seconds for the whole run, job included.",
)
@click.option("--require-gpu", is_flag=True, help="Fail (DDP028) when no usable GPU is found.")
@click.option(
    "--nproc",
    type=click.IntRange(min=1, max=512),
    help="Ranks in the job [default: one per visible GPU, or 2 without GPUs].",
)
@click.option(
    "--backend",
    type=click.Choice(["nccl", "gloo"]),
    help="Process-group backend [default: nccl with GPUs, else gloo].",
)
@click.option(
    "--nnodes",
    default=None,
    metavar="N|MIN:MAX",
    help="Nodes in the job, as torchrun's --nnodes; run one ddp-doctor per node [default: "
    "1, or PET_NNODES, or the SLURM allocation's nodes].",
)
@click.option(
    "--node-rank",
    type=click.IntRange(min=0),
    default=None,
    help="This node's rank for the static rendezvous (0 on the master's node).",
)
@click.option(
    "--master-addr",
    default=None,
    help="Address of the job's store: node 0's for several nodes [default: 127.0.0.1].",
)
@click.option(
    "--master-port",
    type=click.IntRange(min=1, max=65535),
    help="Port of the job's store [default: a free port; several nodes need one].",
)
@click.option(
    "--rdzv-endpoint",
    default=None,
    metavar="HOST[:PORT]",
    help="The c10d rendezvous instead of static, as torchrun's --rdzv-endpoint.",
)
@click.option("--rdzv-id", default=None, help="The rendezvous id, the same on every node.")
@click.option(
    "--as-is",
    is_flag=True,
    help="Run the job exactly as the environment stands, without the fixes the network "
    "preflight predicts (to reproduce a failure).",
)
@click.option(
    "--isolate",
    is_flag=True,
    help="Several nodes: test them in pairs first (connection, exact all-reduce, bandwidth "
    "both ways) and name the bad ones with an exclude list.",
)
@click.option(
    "--isolate-slow-below",
    type=click.FloatRange(min=0.01, max=0.99),
    default=None,
    metavar="FRACTION",
    help="With --isolate: a pair under this fraction of round 1's median bandwidth is slow "
    "[default: 0.5].",
)
@click.option(
    "--sizes",
    default=None,
    metavar="MIN:MAX:FACTOR",
    help="All-reduce sweep sizes, as nccl-tests' -b -e -f (e.g. 1K:64M:4).",
)
@click.option(
    "--iters",
    type=click.IntRange(min=1, max=10000),
    default=None,
    help="Timed iterations per size.",
)
@click.option(
    "--ops",
    default=None,
    metavar="OP[,OP...]",
    help="Collectives to sweep: all_reduce, all_gather, reduce_scatter, broadcast, all_to_all "
    "[default: all_reduce].",
)
@click.option(
    "--min-busbw",
    type=FiniteFloat(0.0, MAX_BUSBW_GBPS),
    default=None,
    metavar="GBPS",
    help="Flag all-reduce bus bandwidth below this (GB/s) at the largest size.",
)
@click.option(
    "--python",
    "python",
    default=None,
    metavar="PATH",
    help="The Python to examine and run the job with: an interpreter, a virtualenv or a conda "
    "env folder [default: the active virtualenv or "
    "conda env, else this Python if it has torch, else python3 on PATH].",
)
@click.option("--no-jobs", is_flag=True, help="Only the in-process probes; launch nothing.")
def run_command(
    report_options: ReportOptions,
    timeout: float,
    require_gpu: bool,
    nproc: int | None,
    backend: str | None,
    nnodes: str | None,
    node_rank: int | None,
    master_addr: str | None,
    master_port: int | None,
    rdzv_endpoint: str | None,
    rdzv_id: str | None,
    as_is: bool,
    isolate: bool,
    isolate_slow_below: float | None,
    sizes: str | None,
    iters: int | None,
    ops: str | None,
    min_busbw: float | None,
    python: str | None,
    no_jobs: bool,
) -> None:
    """Probe this machine's torch, CUDA, NCCL and GPUs, launch a small torchrun job, and print
    a diagnosis with a fix for every finding."""
    sizes = _checked_sizes(sizes)
    flags = LaunchFlags(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id)
    nodes = _planned_nodes(flags)
    if isolate:
        nodes = _isolating(nodes, no_jobs, isolate_slow_below)
    elif isolate_slow_below is not None:
        raise click.UsageError("--isolate-slow-below is a threshold of --isolate's pair tests")
    plan = PlanFacts(
        nproc=nproc or _torchrun_nproc(nodes),
        backend=backend,
        require_gpu=require_gpu,
        min_busbw_gbps=min_busbw,
        master_addr=nodes.master_addr if nodes else master_addr or DEFAULT_MASTER_ADDR,
        master_port=nodes.master_port if nodes else master_port,
        jobs=not no_jobs,
        sizes=sizes,
        iters=iters,
        timeout_s=timeout,
        python=python,
        ops=_checked_ops(ops),
        nodes=nodes,
        as_is=as_is,
    )
    results = _collect_in_workspace(plan, timeout, report_options.selector)
    report = make_report(results, judge(results, report_options.selector))
    finish(report, report_options)


def _collect_in_workspace(plan: PlanFacts, timeout: float, selector: Selector) -> list[ProbeResult]:
    """Everything runs inside the doctor's one temporary folder; without one, nothing can
    (DDP905)."""
    from ddp_doctor.probes.workspace import WorkspaceUnavailable, workspace

    try:
        with workspace():
            return collect(plan, timeout, Progress.to_stderr(), selector)
    except WorkspaceUnavailable as error:
        return [
            ProbeResult("plan", ProbeStatus.OK, plan, 0.0),
            ProbeResult("workspace", ProbeStatus.FAILED, None, 0.0, str(error)),
        ]


def _planned_nodes(flags: LaunchFlags) -> NodePlan | None:
    import os

    from ddp_doctor.probes.scheduler import expand_nodelist
    from ddp_doctor.run.nodeplan import PlanError, plan_nodes

    try:
        return plan_nodes(flags, os.environ, expand_nodelist)
    except PlanError as error:
        raise click.UsageError(str(error)) from None


def _isolating(nodes: NodePlan | None, no_jobs: bool, slow_below: float | None) -> NodePlan:
    import dataclasses

    if no_jobs:
        raise click.UsageError("--isolate tests nodes inside the job: --no-jobs launches none")
    if nodes is None or nodes.nnodes < 2:
        raise click.UsageError(
            "--isolate tests nodes in pairs: it needs a run of several nodes (--nnodes 2 or "
            "more, or a scheduler's allocation of several)"
        )
    if slow_below is None:
        return dataclasses.replace(nodes, isolate=True)
    return dataclasses.replace(nodes, isolate=True, isolate_slow_below=slow_below)


def _torchrun_nproc(nodes: NodePlan | None) -> int | None:
    """A Kubeflow PyTorchJob says how many ranks each node runs (PET_NPROC_PER_NODE)."""
    import os

    value = os.environ.get("PET_NPROC_PER_NODE", "")
    return int(value) if nodes is not None and value.isdigit() and int(value) > 0 else None


def _checked_sizes(sizes: str | None) -> str | None:
    from ddp_doctor.patient.bandwidth import parse_sizes

    if sizes is None:
        return None
    if len(sizes) > 100:
        raise click.BadParameter("too long for MIN:MAX:FACTOR", param_hint="--sizes")
    try:
        parsed = parse_sizes(sizes)
    except ValueError as error:  # SizesError, and int() refusing thousands of digits
        raise click.BadParameter(str(error), param_hint="--sizes") from None
    if parsed[-1] > MAX_SIZE_BYTES:
        raise click.BadParameter(
            f"{sizes!r}: sizes above {MAX_SIZE_BYTES // 1024**3}G per rank are not supported",
            param_hint="--sizes",
        )
    if len(parsed) > MAX_SIZES:
        raise click.BadParameter(
            f"{sizes!r} makes {len(parsed)} sizes; at most {MAX_SIZES}", param_hint="--sizes"
        )
    return sizes


def _checked_ops(ops: str | None) -> tuple[str, ...]:
    from ddp_doctor.patient.bandwidth import SizesError, parse_ops

    if ops is None:
        return ()
    try:
        return parse_ops(ops)
    except SizesError as error:
        raise click.BadParameter(str(error), param_hint="--ops") from None
