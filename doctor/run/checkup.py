"""The `run` operation: which probes run in which order, and what time each one gets.

The quick probes first (in threads), the patient's Python described before anything imports
torch, then the job, torch last if the job did not describe it, DataParallel after the job;
every step gets what is left of the run's time limit. One node of several (plan.nodes) adds
the network preflight before the job and runs the job on torchrun's rendezvous with the other
nodes (cluster_run.py); DataParallel is then left to single-node runs. Commands print; this
decides.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from ddp_doctor.engine import PendingProbes, Probe, run_probe
from ddp_doctor.facts.machine import GpuFacts, PlanFacts, PythonFacts, TorchFacts
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.progress import Progress
from ddp_doctor.registry import Selector

DEFAULT_PROBE_TIMEOUT_S = 20.0
TORCH_PROBE_TIMEOUT_S = 40.0
DATAPARALLEL_TIMEOUT_S = 90.0
TORCH_RESERVE_S = 8.0
JOB_GRACE_S = 10.0  # the job bounds itself; this only catches a launcher that hangs
PROBE_ORDER = (
    "plan",
    "env",
    "host",
    "python",
    "nvml",
    "topology",
    "network",
    "torch",
    "job",
    "cluster",
    "dataparallel",
    "collect_env",
)
MULTINODE_DATAPARALLEL = "a multi-node run: the DataParallel probe runs in single-node runs"


class Budget:
    """What is left of the run's time limit; never less than a second for the next step."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())


def collect(
    plan: PlanFacts, timeout: float, progress: Progress, selector: Selector | None = None
) -> list[ProbeResult]:
    """`selector`: what node 0 of a multi-node run reports to the other nodes."""
    from ddp_doctor.probes.environment import collect_environment
    from ddp_doctor.probes.host import collect_host
    from ddp_doctor.probes.interpreter import choose_python, collect_python
    from ddp_doctor.probes.nvml import collect_nvml
    from ddp_doctor.run.jobplan import visible_gpu_count, visible_gpus

    budget = Budget(timeout)
    quick = min(DEFAULT_PROBE_TIMEOUT_S, timeout)
    python, chosen_by = choose_python(plan.python, os.environ)
    pending = PendingProbes(
        [
            Probe("plan", lambda: plan, quick),
            Probe("host", collect_host, quick),
            Probe("python", lambda: collect_python(python, chosen_by, quick), quick),
        ]
    )
    env_result = run_probe(Probe("env", collect_environment, quick))
    progress.say("probing: NVML")
    nvml_result = run_probe(Probe("nvml", collect_nvml, quick))
    topology = _topology(nvml_result, quick)
    gpus = visible_gpu_count(nvml_result.facts, env_result.facts)  # MIG slices count here
    sample = visible_gpus(nvml_result.facts, env_result.facts)  # whole GPUs NVML can sample
    results = [env_result, nvml_result, *pending.wait()]
    unusable = why_patient_unusable(_facts_of(results, "python"), python)
    if unusable is not None:
        results += [*without_patient(unusable, plan), _unloaded(topology, unusable[0])]
    else:
        if plan.nodes is not None and plan.jobs:
            from ddp_doctor.run.cluster import network_probe

            progress.say("probing: the network towards the master")
            results.append(run_probe(network_probe(plan.nodes, timeout, progress)))
        visible = (gpus, sample)
        results += _with_patient(
            plan, python, visible, topology, budget, progress, results, selector
        )
        results.append(run_probe(collect_env_probe(python, quick)))  # after the job: no rival
    progress.done()
    return sorted(results, key=lambda r: PROBE_ORDER.index(r.probe))


def why_patient_unusable(facts: PythonFacts | None, python: str) -> tuple[str, bool] | None:
    """(why nothing can run in the patient, whether it is torch that is missing), or None."""
    if facts is None or not facts.runs:
        return f"the Python {python!r} does not run", False
    if facts.too_old:
        return f"Python {facts.version} at {python!r} is too old for the job", False
    if facts.torch_origin is None:
        return f"No module named 'torch' in {python!r}", True
    return None


def without_patient(unusable: tuple[str, bool], plan: PlanFacts) -> list[ProbeResult]:
    """No torch, or no runnable Python: the torch probe says so, nothing is launched."""
    reason, torch_missing = unusable
    if torch_missing:
        torch = ProbeResult(
            "torch",
            ProbeStatus.FAILED,
            TorchFacts(importable=False, import_error=reason),
            0.0,
            f"torch does not import: {reason}",
        )
    else:
        torch = ProbeResult("torch", ProbeStatus.SKIPPED, None, 0.0, reason)
    skipped = [torch]
    if plan.jobs:
        for probe in ("job", "dataparallel"):
            skipped.append(ProbeResult(probe, ProbeStatus.SKIPPED, None, 0.0, reason))
    return skipped


def _with_patient(
    plan: PlanFacts,
    python: str,
    visible: tuple[int, tuple[GpuFacts, ...]],
    topology: ProbeResult,
    budget: Budget,
    progress: Progress,
    earlier: list[ProbeResult],
    selector: Selector | None,
) -> list[ProbeResult]:
    from ddp_doctor.probes.job.dataparallel import collect_dataparallel
    from ddp_doctor.run.jobplan import torch_from_job

    gpus, sample = visible
    results: list[ProbeResult] = []
    torch_first = not plan.jobs or plan.backend == "nccl"  # nccl must be known before launch
    if torch_first:
        results.append(run_probe(_torch_probe(python, budget.left())))
    if plan.jobs:
        # Keep time for the torch probe in case the job ends before rank 0 describes torch.
        spare = budget.left() < 3 * TORCH_RESERVE_S
        reserve = 0.0 if torch_first or spare else TORCH_RESERVE_S
        torch = _facts_of(results, "torch")
        left = budget.left() - reserve
        if plan.nodes is not None:
            from ddp_doctor.run.cluster import cluster_job

            known = [*earlier, *results]
            results += cluster_job(plan, python, gpus, known, torch, left, progress, selector)
            topology = _unloaded(topology, "a multi-node run (sampled in single-node runs)")
        else:
            job, topology = _job(plan, python, gpus, torch, left, progress, topology)
            results.append(job)
    else:
        topology = _unloaded(topology, "no job ran (--no-jobs)")
    results.append(topology)
    if not torch_first:
        results.append(torch_from_job(results) or run_probe(_torch_probe(python, budget.left())))
    if plan.jobs and plan.nodes is not None:
        skipped = ProbeResult(
            "dataparallel", ProbeStatus.SKIPPED, None, 0.0, MULTINODE_DATAPARALLEL
        )
        results.append(skipped)
    elif plan.jobs:
        progress.say("probing: DataParallel")
        limit = min(DATAPARALLEL_TIMEOUT_S, budget.left())

        def measure() -> Any:
            return collect_dataparallel(gpus, limit, sample, python=python)

        results.append(run_probe(Probe("dataparallel", measure, limit + 2)))
    return results


def _job(
    plan: PlanFacts,
    python: str,
    gpus: int,
    torch: TorchFacts | None,
    left: float,
    progress: Progress,
    topology: ProbeResult,
) -> tuple[ProbeResult, ProbeResult]:
    """The job, and the topology with the PCIe links as they were while it ran."""
    from ddp_doctor.probes.job.launch import StageWatcher
    from ddp_doctor.probes.job.pcie_load import PcieLoadSampler, ran_load_stage, with_load_samples
    from ddp_doctor.run.jobplan import job_config, run_job_probe

    nccl_missing = plan.backend == "nccl" and torch is not None and not torch.nccl_available
    config = job_config(plan, gpus, left, python)

    def job(watcher: StageWatcher | None) -> ProbeResult:
        def collect_job() -> Any:
            return run_job_probe(config, nccl_missing, progress.say, watcher)

        return run_probe(Probe("job", collect_job, left + JOB_GRACE_S))

    if topology.facts is None:
        return job(None), topology
    with PcieLoadSampler() as sampler:
        result = job(sampler.on_stage)
    note = sampler.note(job_ran_load_stage=ran_load_stage(result.facts))
    facts = with_load_samples(topology.facts, sampler.best, note)
    return result, dataclasses.replace(topology, facts=facts)


def _topology(nvml: ProbeResult, limit: float) -> ProbeResult:
    from ddp_doctor.probes.topology import collect_topology

    if not nvml.ok:
        why = nvml.error or f"the NVML probe {nvml.status.value}"
        return ProbeResult("topology", ProbeStatus.SKIPPED, None, 0.0, f"needs NVML ({why})")
    return run_probe(Probe("topology", collect_topology, limit))


def _unloaded(topology: ProbeResult, why: str) -> ProbeResult:
    """The topology without PCIe samples under load, and why none were taken."""
    from ddp_doctor.probes.job.pcie_load import with_load_samples

    if topology.facts is None:
        return topology
    facts = with_load_samples(topology.facts, {}, f"not sampled: {why}")
    return dataclasses.replace(topology, facts=facts)


def collect_env_probe(python: str, limit: float) -> Probe:
    """What collect_env reports beyond the other probes (toolchain, CPU, packages)."""
    from ddp_doctor.probes.collect_env import collect_collect_env

    return Probe("collect_env", lambda: collect_collect_env(python, limit), limit + 2)


def _torch_probe(python: str, left: float) -> Probe:
    from ddp_doctor.probes.torch_info import collect_torch

    limit = min(TORCH_PROBE_TIMEOUT_S, left)
    return Probe("torch", lambda: collect_torch(python, timeout_s=limit), limit + 2)


def _facts_of(results: list[ProbeResult], probe: str) -> Any:
    return next((r.facts for r in results if r.probe == probe), None)
