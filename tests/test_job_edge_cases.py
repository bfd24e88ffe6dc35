"""Job facts at the edges: no rank started, NCCL's watchdog abort, one rank, hidden GPUs,
a DataParallel probe that failed for another reason. Built by editing recorded fixtures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor.facts.job import DataParallelFacts, RankFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.report_io import report_from_json

JOBS = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"


def probes(name: str) -> dict[str, ProbeResult]:
    report = report_from_json(json.loads((JOBS / f"{name}.json").read_text()))
    return {result.probe: result for result in report.probes}


def codes(results: dict[str, ProbeResult]) -> set[str]:
    return {finding.code for finding in judge(list(results.values()))}


def with_job(results: dict[str, ProbeResult], **changes: object) -> dict[str, ProbeResult]:
    job = results["job"]
    return {**results, "job": replace(job, facts=replace(job.facts, **changes))}


def test_a_launcher_that_starts_no_rank_is_not_a_rendezvous_timeout() -> None:
    results = probes("healthy-2rank-gloo")
    empty = tuple(RankFacts(rank) for rank in (0, 1))
    results = with_job(results, ranks=empty, identities=(), bandwidth=(), exit_code=1)
    found = codes(results)
    assert "DDP202" not in found and "DDP308" in found


def test_nccl_watchdog_abort_on_every_rank_is_a_hang_not_a_crash() -> None:
    results = probes("collective-hang")
    job = results["job"].facts
    aborted = tuple(
        replace(
            rank,
            exit_code=-6,
            stages=(*rank.stages[:-1], replace(rank.stages[-1], ended=False, ok=False, error=None)),
        )
        for rank in job.ranks
    )
    output = "[rank0]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE)"
    found = codes(with_job(results, ranks=aborted, output_tail=output))
    assert "DDP302" in found and "DDP307" not in found


def test_min_busbw_is_not_judged_with_one_rank() -> None:
    results = probes("low-busbw")
    assert "DDP303" in codes(results)
    assert "DDP303" not in codes(with_job(results, nproc=1))


def test_dataparallel_failing_for_another_reason_is_not_a_device_mismatch() -> None:
    results = probes("dataparallel-output-mismatch")
    failed = DataParallelFacts(
        (0, 1),
        0,
        "cuda:0",
        "none",
        (0, 0),
        "RuntimeError: CUDA error: no kernel image is available",
    )
    results["dataparallel"] = ProbeResult(
        "dataparallel", ProbeStatus.FAILED, failed, 1.0, failed.error
    )
    found = codes(results)
    assert "DDP405" not in found and "DDP904" in found


def test_hidden_gpus_are_not_too_few_gpus() -> None:
    """CUDA_VISIBLE_DEVICES=-1 on a GPU node: the job runs on gloo, DDP027 must stay silent."""
    results = probes("healthy-2rank-gloo")
    facts_dir = JOBS.parent / "facts"
    node = report_from_json(json.loads((facts_dir / "healthy-8xh100.json").read_text()))
    results["nvml"] = next(r for r in node.probes if r.probe == "nvml")
    env = results["env"]
    results["env"] = replace(
        env, facts=replace(env.facts, variables={"CUDA_VISIBLE_DEVICES": "-1"})
    )
    results["plan"] = replace(results["plan"], facts=replace(results["plan"].facts, nproc=2))
    assert "DDP027" not in codes(results)


def test_launcher_variables_of_a_surrounding_job_do_not_reach_the_doctors_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ddp_doctor.probes.job.launch import job_environment

    monkeypatch.setenv("PET_NODE_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "other")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    env = job_environment(tmp_path)
    assert "PET_NODE_RANK" not in env and "TORCHELASTIC_RUN_ID" not in env
    assert env["NCCL_DEBUG"] == "INFO" and env["TMPDIR"] == str(tmp_path)


def test_a_probe_error_that_is_not_text_is_a_malformed_report() -> None:
    from ddp_doctor.report_io import ReportError

    document = json.loads((JOBS / "healthy-2rank-gloo.json").read_text())
    document["probes"][0]["error"] = 5
    with pytest.raises(ReportError):
        report_from_json(document)
