"""The ladder of layers between nodes (doctor/readings/ladder.py, DDP221): the store and gloo
rungs on the real four-host and two-host recordings, the NCCL rungs on NCCL's own INFO lines
(tests/ladder_lines.py, sources there) put into a recorded report's job."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import ladder_lines as lines
import pytest

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.topology import Fabric, GpuTopology, TopologyFacts
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.readings.ladder import (
    FAILED,
    NOT_RUN,
    PASSED,
    RUNGS,
    first_failed,
    ladder,
    nccl_net,
)
from ddp_doctor.report_io import report_from_json

JOBS = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"


def recorded(name: str) -> list[ProbeResult]:
    return list(report_from_json(json.loads((JOBS / f"{name}.json").read_text())).probes)


def states(results: list[ProbeResult]) -> dict[str, str]:
    rungs = ladder(FactSet.of(results))
    assert [r.name for r in rungs] == list(RUNGS)
    return {r.name: r.state for r in rungs}


def with_nccl(output: str, nvswitch: bool = False) -> list[ProbeResult]:
    """The healthy four-host recording as if its job had run NCCL and printed `output`."""
    results = []
    for result in recorded("isolate-recorded-healthy-node0"):
        if result.probe == "job":
            job = dataclasses.replace(result.facts, backend="nccl", output_tail=output)
            result = dataclasses.replace(result, facts=job)
        if result.probe == "topology" and nvswitch:
            gpu = GpuTopology(0, "0000:18:00.0", fabric=Fabric("completed", 0))
            result = ProbeResult("topology", ProbeStatus.OK, TopologyFacts(gpus=(gpu,)), 0.0)
        results.append(result)
    if nvswitch and not any(r.probe == "topology" for r in results):
        gpu = GpuTopology(0, "0000:18:00.0", fabric=Fabric("completed", 0))
        results.append(ProbeResult("topology", ProbeStatus.OK, TopologyFacts(gpus=(gpu,)), 0.0))
    return results


def test_a_healthy_gloo_cluster_passes_store_and_gloo() -> None:
    found = states(recorded("isolate-recorded-healthy-node0"))
    assert (found["store"], found["gloo"]) == (PASSED, PASSED)
    assert {found[name] for name in RUNGS[2:]} == {NOT_RUN}


def test_a_node_cut_off_stops_the_ladder_at_gloo() -> None:
    rungs = ladder(FactSet.of(recorded("isolate-recorded-cut-off-node0")))
    failed = first_failed(rungs)
    assert failed is not None and failed.name == "gloo" and "2" in failed.why
    assert rungs[0].state == PASSED and {r.state for r in rungs[2:]} == {NOT_RUN}


def test_a_master_port_dropped_stops_the_ladder_at_the_store() -> None:
    found = states(recorded("multinode-port-dropped-node1"))
    assert found["store"] == FAILED and {found[n] for n in RUNGS[1:]} == {NOT_RUN}


@pytest.mark.parametrize(
    ("output", "rung"),
    [
        (lines.SOCKETS_NO_DEVICE, "nccl-fabric"),
        (lines.IB_FOUND_BUT_SOCKETS, "nccl-fabric"),
        (lines.IB_WITHOUT_GDR, "gpudirect"),
    ],
    ids=["no-ib-device", "ib-found-sockets-used", "ib-without-gdrdma"],
)
def test_ddp221_names_the_first_nccl_rung_that_fails(output: str, rung: str) -> None:
    (found,) = [f for f in judge(with_nccl(output)) if f.code == "DDP221"]
    assert found.evidence["rung"] == rung
    assert found.evidence["rungs"]["nccl-socket"] == PASSED
    after = RUNGS[RUNGS.index(rung) + 1 :]
    assert {found.evidence["rungs"][name] for name in after} == {NOT_RUN}


def test_nvls_is_judged_only_in_an_nvswitch_fabric() -> None:
    output = lines.ROCE_WITH_GDR + lines.NVLS_UNAVAILABLE
    assert "DDP221" not in {f.code for f in judge(with_nccl(output))}
    (found,) = [f for f in judge(with_nccl(output, nvswitch=True)) if f.code == "DDP221"]
    assert found.evidence["rung"] == "nvls"


def test_the_fabric_with_gpudirect_passes_every_rung() -> None:
    found = states(with_nccl(lines.ROCE_WITH_GDR))
    assert [found[n] for n in RUNGS[:5]] == [PASSED] * 5
    assert "DDP221" not in {f.code for f in judge(with_nccl(lines.ROCE_WITH_GDR))}


def test_without_nccls_lines_the_fabric_rungs_are_not_run() -> None:
    found = states(with_nccl("no NCCL here\n"))
    assert found["nccl-socket"] == PASSED and {found[n] for n in RUNGS[3:]} == {NOT_RUN}


def test_ncclnet_reads_the_documented_lines() -> None:
    net = nccl_net(lines.ROCE_WITH_GDR)
    assert net.network == "IB" and net.gdr is True and net.via == ("NET/IB",)
    assert net.ib_devices == ("[0]mlx5_10:1/RoCE", "[1]mlx5_11:1/RoCE")
    net = nccl_net(lines.SOCKETS_NO_DEVICE)
    assert net.no_ib_device and net.network == "Socket" and net.gdr is None
    assert nccl_net(lines.IB_WITHOUT_GDR).gdr is False
    assert nccl_net("x" * 100000).seen is False
