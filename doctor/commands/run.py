"""`run`: probe this machine, launch the job, judge, print."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import click

from ddp_doctor.cli import ReportOptions, finish, report_options
from ddp_doctor.engine import PendingProbes, Probe, judge, make_report, run_probe
from ddp_doctor.facts import PlanFacts, TorchFacts
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.probes.pcie_load import with_load_samples
from ddp_doctor.progress import Progress

DEFAULT_PROBE_TIMEOUT_S = 20.0
TORCH_PROBE_TIMEOUT_S = 40.0
DATAPARALLEL_TIMEOUT_S = 90.0
TORCH_RESERVE_S = 8.0
JOB_GRACE_S = 10.0  # the job bounds itself; this only catches a launcher that hangs
PROBE_ORDER = ("plan", "env", "host", "nvml", "topology", "torch", "job", "dataparallel")


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
        ops=_checked_ops(ops),
    )
    results = collect(plan, timeout, Progress.to_stderr())
    report = make_report(results, judge(results, report_options.selector))
    finish(report, report_options)


def collect(plan: PlanFacts, timeout: float, progress: Progress) -> list[ProbeResult]:
    """The quick probes first (in threads), then the job, torch last if the job did not
    describe it; every step gets what is left of `timeout`."""
    from ddp_doctor.jobplan import visible_gpu_count
    from ddp_doctor.probes.dataparallel import collect_dataparallel
    from ddp_doctor.probes.environment import collect_environment
    from ddp_doctor.probes.host import collect_host
    from ddp_doctor.probes.nvml import collect_nvml

    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    quick = min(DEFAULT_PROBE_TIMEOUT_S, timeout)
    torch_first = not plan.jobs or plan.backend == "nccl"  # nccl must be known before launch
    pending = PendingProbes(
        [Probe("plan", lambda: plan, quick), Probe("host", collect_host, quick)]
        + ([_torch_probe(left())] if torch_first else [])
    )
    env_result = run_probe(Probe("env", collect_environment, quick))
    progress.say("probing: NVML")
    nvml_result = run_probe(Probe("nvml", collect_nvml, quick))
    topology_result = _topology(nvml_result, quick)
    gpus = visible_gpu_count(nvml_result.facts, env_result.facts)
    results = [env_result, nvml_result, *(pending.wait() if torch_first else [])]
    if plan.jobs:
        # Keep time for the torch probe in case the job ends before rank 0 describes torch.
        reserve = 0.0 if torch_first or left() < 3 * TORCH_RESERVE_S else TORCH_RESERVE_S
        job_budget = left() - reserve
        job_result, topology_result = _job(
            plan, gpus, _facts_of(results, "torch"), job_budget, progress, topology_result
        )
        results.append(job_result)
    elif topology_result.facts is not None:
        facts = with_load_samples(topology_result.facts, {}, "not sampled: no job ran (--no-jobs)")
        topology_result = dataclasses.replace(topology_result, facts=facts)
    results.append(topology_result)
    if not torch_first:
        results += pending.wait()
    if not any(r.probe == "torch" for r in results):
        results.append(_torch_from_job(results) or run_probe(_torch_probe(left())))
    if plan.jobs:
        progress.say("probing: DataParallel")
        limit = min(DATAPARALLEL_TIMEOUT_S, left())
        results.append(
            run_probe(Probe("dataparallel", lambda: collect_dataparallel(gpus, limit), limit + 2))
        )
    progress.done()
    return sorted(results, key=lambda r: PROBE_ORDER.index(r.probe))


def _topology(nvml: ProbeResult, limit: float) -> ProbeResult:
    from ddp_doctor.probes.topology import collect_topology

    if not nvml.ok:
        why = nvml.error or f"the NVML probe {nvml.status.value}"
        return ProbeResult("topology", ProbeStatus.SKIPPED, None, 0.0, f"needs NVML ({why})")
    return run_probe(Probe("topology", collect_topology, limit))


def _job(
    plan: PlanFacts,
    gpus: int,
    torch: TorchFacts | None,
    left: float,
    progress: Progress,
    topology: ProbeResult,
) -> tuple[ProbeResult, ProbeResult]:
    """The job, and the topology with the PCIe links as they were while it ran."""
    from ddp_doctor.jobfacts import JobFacts
    from ddp_doctor.jobplan import job_config, run_job_probe
    from ddp_doctor.probes.launch import StageWatcher
    from ddp_doctor.probes.pcie_load import PcieLoadSampler

    nccl_missing = plan.backend == "nccl" and torch is not None and not torch.nccl_available
    config = job_config(plan, gpus, left)

    def job(watcher: StageWatcher | None) -> ProbeResult:
        def collect() -> JobFacts:
            return run_job_probe(config, nccl_missing, progress.say, watcher)

        return run_probe(Probe("job", collect, left + JOB_GRACE_S))

    if topology.facts is None:
        return job(None), topology
    with PcieLoadSampler() as sampler:
        result = job(sampler.on_stage)
    facts = with_load_samples(topology.facts, sampler.best, sampler.note())
    return result, dataclasses.replace(topology, facts=facts)


def _torch_probe(left: float) -> Probe:
    from ddp_doctor.probes.torch_info import collect_torch

    limit = min(TORCH_PROBE_TIMEOUT_S, left)
    return Probe("torch", lambda: collect_torch(timeout_s=limit), limit + 2)


def _torch_from_job(results: list[ProbeResult]) -> ProbeResult | None:
    """Rank 0 of the job already described its torch: no second import of torch needed."""
    from ddp_doctor.codec import CodecError, from_jsonable
    from ddp_doctor.probes.job_results import torch_facts_from_job

    job = _facts_of(results, "job")
    described = torch_facts_from_job(job.ranks) if job else None
    if not described:
        return None
    try:
        facts = from_jsonable(TorchFacts, described)
    except CodecError:
        return None
    return ProbeResult("torch", ProbeStatus.OK, facts, 0.0, None)


def _facts_of(results: list[ProbeResult], probe: str) -> Any:
    return next((r.facts for r in results if r.probe == probe), None)


def _checked_ops(ops: str | None) -> tuple[str, ...]:
    from ddp_doctor.probes.bandwidth import SizesError, parse_ops

    if ops is None:
        return ()
    try:
        return parse_ops(ops)
    except SizesError as error:
        raise click.BadParameter(str(error), param_hint="--ops") from None


def _checked_sizes(sizes: str | None) -> str | None:
    from ddp_doctor.probes.bandwidth import SizesError, parse_sizes

    if sizes is not None:
        try:
            parse_sizes(sizes)
        except SizesError as error:
            raise click.BadParameter(str(error), param_hint="--sizes") from None
    return sizes
