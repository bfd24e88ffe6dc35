"""`run`: probe this machine, launch the job, judge, print."""

from __future__ import annotations

from pathlib import Path

import click
from ddp_doctor.cli import check_output_writable, finish, make_selector, report_options
from ddp_doctor.engine import Probe, judge, make_report, run_probes
from ddp_doctor.facts import PlanFacts

DEFAULT_PROBE_TIMEOUT_S = 20.0
TORCH_PROBE_TIMEOUT_S = 40.0


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
    "--min-busbw",
    type=click.FloatRange(min=0),
    default=None,
    metavar="GBPS",
    help="Flag all-reduce bus bandwidth below this (GB/s) at the largest size.",
)
@click.option("--no-jobs", is_flag=True, help="Only the in-process probes; launch nothing.")
def run_command(
    fmt: str,
    output: Path | None,
    fail_on: str,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    verbose: bool,
    redact_hosts: bool,
    timeout: float,
    require_gpu: bool,
    nproc: int | None,
    backend: str | None,
    master_addr: str,
    master_port: int | None,
    sizes: str | None,
    iters: int | None,
    min_busbw: float | None,
    no_jobs: bool,
) -> None:
    """Probe this machine's torch, CUDA, NCCL and GPUs, launch a small torchrun job, and print
    a diagnosis with a fix for every finding."""
    selector = make_selector(select, ignore)
    check_output_writable(output)
    plan = PlanFacts(
        nproc=nproc,
        backend=backend,
        require_gpu=require_gpu,
        min_busbw_gbps=min_busbw,
        master_addr=master_addr,
        master_port=master_port,
        jobs=not no_jobs,
    )
    results = run_probes(in_process_probes(plan, timeout))
    report = make_report(results, judge(results, selector))
    finish(report, fmt, output, fail_on, verbose=verbose, redact_hosts=redact_hosts)


def in_process_probes(plan: PlanFacts, timeout: float) -> list[Probe]:
    from ddp_doctor.probes.environment import collect_environment
    from ddp_doctor.probes.host import collect_host
    from ddp_doctor.probes.nvml import collect_nvml
    from ddp_doctor.probes.torch_info import collect_torch

    quick = min(DEFAULT_PROBE_TIMEOUT_S, timeout)
    torch_limit = min(TORCH_PROBE_TIMEOUT_S, timeout)
    return [
        Probe("plan", lambda: plan, quick),
        Probe("env", collect_environment, quick),
        Probe("host", collect_host, quick),
        Probe("nvml", collect_nvml, quick),
        Probe("torch", lambda: collect_torch(timeout_s=torch_limit), torch_limit + 2),
    ]
