"""DDP403 counts the job's CUDA contexts per GPU from NVML's process lists, so it works where
NVML's pids are the host's and the ranks' are a container's (fixtures/jobs)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ddp_doctor.judge import judge
from ddp_doctor.model import Finding, ProbeResult
from ddp_doctor.report_io import report_from_json

JOBS = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"
MIB = 1024**2


def results(name: str) -> dict[str, ProbeResult]:
    report = report_from_json(json.loads((JOBS / f"{name}.json").read_text()))
    return {r.probe: r for r in report.probes}


def ddp403(probes: dict[str, ProbeResult]) -> list[Finding]:
    return [f for f in judge(list(probes.values())) if f.code == "DDP403"]


def nvml_pids(probes: dict[str, ProbeResult]) -> set[int]:
    rank0 = probes["job"].facts.rank(0)
    return {row["pid"] for row in rank0.stage("memory").data["gpu_processes"]}


def test_stray_contexts_in_a_pid_namespace_are_counted_per_gpu() -> None:
    probes = results("stray-context-container")
    ranks_pids = {identity.pid for identity in probes["job"].facts.identities}
    assert not nvml_pids(probes) & ranks_pids  # NVML's pids are the host's
    (finding,) = ddp403(probes)
    assert finding.evidence == {
        "gpu": 0,
        "pci_bus_id": "00000000:18:00.0",
        "contexts": 4,
        "ranks_on_gpu": [0],
        "ranks": [1, 2, 3],
        "extra_contexts": 3,
        "used_bytes": 3 * 504 * MIB,
        "pids_are_ranks": False,
    }


def test_without_a_pid_namespace_the_ranks_are_named_by_pid() -> None:
    (finding,) = ddp403(results("stray-context-gpu0"))
    assert finding.evidence["ranks"] == [1] and finding.evidence["pids_are_ranks"] is True


def test_one_context_per_rank_is_silent_beside_other_jobs() -> None:
    assert ddp403(results("contexts-container-healthy")) == []


def test_processes_there_before_the_job_do_not_count() -> None:
    """Another user's DataParallel job holds GPUs 0 and 1: without the NVML probe's list from
    before the job it would look like a rank's stray context."""
    probes = results("contexts-container-healthy")
    nvml = probes["nvml"]
    gpus = tuple(replace(gpu, processes=()) for gpu in nvml.facts.gpus)
    probes["nvml"] = replace(nvml, facts=replace(nvml.facts, gpus=gpus))
    assert [f.evidence["gpu"] for f in ddp403(probes)] == [0, 1]


def test_a_new_process_on_one_gpu_only_is_not_a_rank() -> None:
    probes = results("contexts-container-healthy")
    rows = probes["job"].facts.rank(0).stage("memory").data["gpu_processes"]
    newcomer = next(row for row in rows if row["gpu"] == 2 and row["used_bytes"] == 700 * MIB)
    assert newcomer["pid"] not in {p.pid for g in probes["nvml"].facts.gpus for p in g.processes}
    assert ddp403(probes) == []


def test_no_process_list_judges_nothing() -> None:
    """Some vGPU setups answer with empty process lists."""
    probes = results("stray-context-container")
    job = probes["job"].facts
    rank0 = job.rank(0)
    stages = tuple(
        replace(s, data={"gpu_processes": []}) if s.stage == "memory" else s for s in rank0.stages
    )
    ranks = tuple(replace(r, stages=stages) if r.rank == 0 else r for r in job.ranks)
    probes["job"] = replace(probes["job"], facts=replace(job, ranks=ranks))
    assert ddp403(probes) == []
