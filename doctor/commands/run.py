"""`run`: probe this machine, launch the job, judge, print."""

from __future__ import annotations

import click

from ddp_doctor.checkup import collect
from ddp_doctor.cli import ReportOptions, finish, report_options
from ddp_doctor.engine import judge, make_report
from ddp_doctor.facts import PlanFacts
from ddp_doctor.progress import Progress


@click.command("run")
@report_options()
@click.option(
    "--timeout",
    type=click.FloatRange(min=1.0),
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
    "--master-addr",
    default="127.0.0.1",
    show_default=True,
    help="Address the job's store listens on.",
)
@click.option(
    "--master-port",
    type=click.IntRange(min=1, max=65535),
    help="Port of the job's store [default: a free port].",
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
    type=click.FloatRange(min=0),
    default=None,
    metavar="GBPS",
    help="Flag all-reduce bus bandwidth below this (GB/s) at the largest size.",
)
@click.option(
    "--python",
    "python",
    default=None,
    metavar="PATH",
    help="The Python to examine and run the job with [default: the active virtualenv or "
    "conda env, else this Python if it has torch, else python3 on PATH].",
)
@click.option("--no-jobs", is_flag=True, help="Only the in-process probes; launch nothing.")
def run_command(
    report_options: ReportOptions,
    timeout: float,
    require_gpu: bool,
    nproc: int | None,
    backend: str | None,
    master_addr: str,
    master_port: int | None,
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
    plan = PlanFacts(
        nproc=nproc,
        backend=backend,
        require_gpu=require_gpu,
        min_busbw_gbps=min_busbw,
        master_addr=master_addr,
        master_port=master_port,
        jobs=not no_jobs,
        sizes=sizes,
        iters=iters,
        timeout_s=timeout,
        python=python,
        ops=_checked_ops(ops),
    )
    results = collect(plan, timeout, Progress.to_stderr())
    report = make_report(results, judge(results, report_options.selector))
    finish(report, report_options)


def _checked_sizes(sizes: str | None) -> str | None:
    from ddp_doctor.probes.bandwidth import SizesError, parse_sizes

    if sizes is not None:
        try:
            parse_sizes(sizes)
        except SizesError as error:
            raise click.BadParameter(str(error), param_hint="--sizes") from None
    return sizes


def _checked_ops(ops: str | None) -> tuple[str, ...]:
    from ddp_doctor.probes.bandwidth import SizesError, parse_ops

    if ops is None:
        return ()
    try:
        return parse_ops(ops)
    except SizesError as error:
        raise click.BadParameter(str(error), param_hint="--ops") from None
