"""`attach [PID]`: diagnose a distributed job that is running now, without restarting it."""

from __future__ import annotations

import click

from ddp_doctor.cli import EXIT_CODES_HELP, DoctorError, ReportOptions, finish, report_options
from ddp_doctor.judge import judge
from ddp_doctor.model import make_report
from ddp_doctor.progress import Progress


@click.command("attach", epilog=EXIT_CODES_HELP)
@report_options()
@click.option(
    "--job",
    "job",
    default=None,
    metavar="ID",
    help="The job to attach to, where "
    "several run: its TORCHELASTIC_RUN_ID, 'slurm JOBID', or its launcher's pid.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2, max=60.0),
    default=3.0,
    show_default=True,
    help="Seconds between two samples of every rank.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=2, max=20),
    default=2,
    show_default=True,
    help="Samples of every rank (stacks, state, CPU time).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=2.0, max=3600.0),
    default=30.0,
    show_default=True,
    help="Upper bound in seconds for the whole attach.",
)
@click.option(
    "--slurm-job",
    default=None,
    metavar="ID",
    help="Attach on every node of this SLURM job (srun --overlap, one task per node) and "
    "merge the nodes into one verdict.",
)
@click.option("--native", is_flag=True, help="Native frames too (py-spy --native; slower).")
@click.argument("pid", required=False, type=click.IntRange(min=1))
def attach_command(
    report_options: ReportOptions,
    job: str | None,
    interval: float,
    samples: int,
    timeout: float,
    native: bool,
    slurm_job: str | None,
    pid: int | None,
) -> None:
    """Diagnose the distributed training job that runs on this host now (torchrun, accelerate,
    deepspeed, mp.spawn, srun, or processes with RANK and WORLD_SIZE): each rank's stacks
    through py-spy, sampled twice, and the verdict: progressing, hung in a collective (which,
    and the ranks missing from it, with their lines), stuck elsewhere, or waiting for one rank.
    Nothing is sent to the job. PID is any process of the job (the launcher or a rank).

    Example: ddp-doctor attach --format markdown -o hang.md
    """
    from ddp_doctor.attach.operation import (
        AttachError,
        AttachRequest,
        attach_results,
        slurm_results,
    )

    if sum(x is not None for x in (pid, job, slurm_job)) > 1:
        raise click.UsageError("give one of PID, --job and --slurm-job")
    target = str(pid) if pid is not None else job
    request = AttachRequest(target, interval, samples, timeout, native)
    if interval * (samples - 1) >= timeout:
        raise click.UsageError("--interval x (--samples - 1) must be shorter than --timeout")
    try:
        if slurm_job is not None:
            results = slurm_results(slurm_job, request, Progress.to_stderr())
        else:
            results = attach_results(request, Progress.to_stderr())
    except AttachError as error:
        raise DoctorError(str(error)) from None
    report = make_report(results, judge(results, report_options.selector))
    finish(report, report_options)
