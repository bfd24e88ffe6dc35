"""How `run` sizes its job from what the quick probes found, and runs it as a probe."""

from __future__ import annotations

from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import EnvFacts, GpuFacts, NvmlFacts, PlanFacts, TorchFacts
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.patient.bandwidth import DEFAULT_OPS
from ddp_doctor.probes.base import ProbeFailed
from ddp_doctor.probes.job.launch import JobConfig, Progress, StageWatcher, preflight, run_job
from ddp_doctor.readings.visible_devices import parse_visible_devices

CPU_SIZES, CPU_ITERS = "1K:4M:4", 5
GPU_SIZES, GPU_ITERS = "1M:256M:4", 20
CPU_RANKS = 2


def visible_gpu_count(nvml: NvmlFacts | None, env: EnvFacts) -> int:
    if nvml is None:
        return 0
    return parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), nvml.gpus).count


def visible_gpus(nvml: NvmlFacts | None, env: EnvFacts) -> tuple[GpuFacts, ...]:
    """The whole GPUs this process may use, as NVML lists them, in CUDA's order."""
    if nvml is None:
        return ()
    return parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), nvml.gpus).gpus


def job_config(plan: PlanFacts, gpus: int, timeout_s: float, python: str) -> JobConfig:
    """One machine's job; one node's of several when the plan has nodes (the rendezvous itself
    is added by cluster_run.py, which knows the network)."""
    nodes = plan.nodes
    return JobConfig(
        python=python,
        nproc=plan.nproc or gpus or CPU_RANKS,
        backend=plan.backend or "auto",
        master_addr=nodes.master_addr if nodes else plan.master_addr,
        master_port=nodes.master_port if nodes else plan.master_port,
        sizes=plan.sizes or (GPU_SIZES if gpus else CPU_SIZES),
        iters=plan.iters or (GPU_ITERS if gpus else CPU_ITERS),
        ops=plan.ops or DEFAULT_OPS,
        timeout_s=timeout_s,
        init_timeout_s=min(30.0, max(5.0, timeout_s / 4)),
    )


def run_job_probe(
    config: JobConfig,
    nccl_missing: bool,
    progress: Progress | None,
    watcher: StageWatcher | None = None,
) -> JobFacts:
    """The job's facts; a job that was not launched is a failed probe (with its preflight
    facts, which the rendezvous rules read), never an ok one."""
    facts = run_job(config, preflight(config, nccl_missing), progress, watcher)
    if not facts.launched:
        raise ProbeFailed(f"not launched: {facts.not_launched_reason}", facts)
    return facts


def torch_from_job(results: list[ProbeResult]) -> ProbeResult | None:
    """Rank 0 of the job already described its torch: no second import of torch needed."""
    from ddp_doctor.codec import CodecError, from_jsonable
    from ddp_doctor.probes.job.results import torch_facts_from_job

    job = next((r.facts for r in results if r.probe == "job"), None)
    described = torch_facts_from_job(job.ranks) if job else None
    if not described:
        return None
    try:
        facts = from_jsonable(TorchFacts, described)
    except CodecError:
        return None
    return ProbeResult("torch", ProbeStatus.OK, facts, 0.0, None)
