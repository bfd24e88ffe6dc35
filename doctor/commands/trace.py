"""`trace -- COMMAND`: run the user's training under the monitor, judge what it really did."""

from __future__ import annotations

import os

import click

from ddp_doctor.cli import EXIT_CODES_HELP, ReportOptions, finish, report_options
from ddp_doctor.judge import judge
from ddp_doctor.model import make_report
from ddp_doctor.progress import Progress
from ddp_doctor.trust.numbers import MAX_COUNT, MAX_TIMEOUT_S, BoundedInt, FiniteFloat

HEARTBEAT_S = 30.0  # without a terminal (CI): the run's status as a line this often


@click.command(
    "trace",
    epilog=EXIT_CODES_HELP,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@report_options()
@click.option(
    "--timeout",
    type=FiniteFloat(5.0, MAX_TIMEOUT_S),
    default=600.0,
    show_default=True,
    help="Upper bound in seconds for the whole run; where the ranks are is collected before it.",
)
@click.option(
    "--steps", type=BoundedInt(1, MAX_COUNT), help="Stop each rank after N optimizer steps."
)
@click.option(
    "--epochs",
    type=BoundedInt(1, MAX_COUNT),
    help="Stop each rank when a DataLoader would start its epoch N+1.",
)
@click.option(
    "--hang-after",
    type=FiniteFloat(1.0, MAX_TIMEOUT_S),
    default=None,
    metavar="SECONDS",
    help="Collect stacks when no rank progressed for this long; a rank in a collective then "
    "means a hang [default: 60, or a third of --timeout if smaller].",
)
@click.option(
    "--python",
    "python",
    default=None,
    metavar="PATH",
    help="The Python that runs the command: an interpreter, a virtualenv or a conda env folder "
    "[default: the one the command names, or torchrun's "
    "own, else as for run].",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True, metavar="-- COMMAND")
def trace_command(
    report_options: ReportOptions,
    timeout: float,
    steps: int | None,
    epochs: int | None,
    hang_after: float | None,
    python: str | None,
    command: tuple[str, ...],
) -> None:
    """Run your training command (`torchrun ... train.py ARGS`, or `python train.py ARGS` for
    one process) with a thin monitor in every rank, and diagnose what it really does: the DDP
    mistakes it makes at runtime, and for a hang, the collective the ranks wait in, the ranks
    that never reached it, and the line each one is at.

    Example: ddp-doctor trace --steps 20 -- torchrun --nproc-per-node 2 train.py --lr 0.1
    """
    from ddp_doctor.trace.command import CommandError, parse_command, spawn_refusal
    from ddp_doctor.trace.operation import collect_trace

    try:
        traced = parse_command(command)
    except CommandError as error:
        raise click.BadParameter(str(error), param_hint="COMMAND") from None
    if traced.entry == "script" and not os.path.isfile(traced.target):
        raise click.BadParameter(f"no such script: {traced.target}", param_hint="COMMAND")
    refusal = spawn_refusal(traced.target) if traced.entry == "script" else None
    if refusal is not None:
        raise click.BadParameter(refusal, param_hint="COMMAND")
    limits = {"timeout_s": timeout, "steps": steps, "epochs": epochs, "hang_after_s": hang_after}
    results = collect_trace(traced, command, python, limits, Progress.to_stderr(HEARTBEAT_S))
    report = make_report(results, judge(results, report_options.selector))
    finish(report, report_options)
