"""NCCL's INFO lines for the doctor's own multi-node job (readings/nccl_debug.py,
probes/job/nccl_lines.py): the job plan's env, the lines kept apart from the output's tail and
bounded, the ladder read from them, and their redaction. NCCL output from tests/ladder_lines.py
(sources there), channel lines as NVIDIA/nccl's src/transport/net.cc prints them."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import ladder_lines as lines
import pytest

from ddp_doctor.codec import to_jsonable
from ddp_doctor.facts.cluster import NodePlan
from ddp_doctor.facts.machine import EnvFacts, FactSet, PlanFacts
from ddp_doctor.model import ProbeResult
from ddp_doctor.probes.job import launch
from ddp_doctor.probes.job.nccl_conf import nccl_conf_variables
from ddp_doctor.probes.job.nccl_lines import MAX_LINE_CHARS, MAX_LINES, split_output
from ddp_doctor.readings.ladder import FAILED, NOT_RUN, PASSED, ladder, nccl_net
from ddp_doctor.readings.nccl_debug import DOCTOR_NCCL_DEBUG, doctor_nccl_env
from ddp_doctor.render import render
from ddp_doctor.report_io import probe_from_json, probe_to_json, report_from_json
from ddp_doctor.run import cluster
from ddp_doctor.run.cluster import _job_config

JOBS = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"
TWO_NODES = NodePlan(2, 2, "static", "node0", 29500, node_rank=0)


def channel_lines(host: str, ranks: int, channels: int, transport: str) -> str:
    return "".join(
        f"{host}:{100 + rank}:{200 + rank} [{rank}] NCCL INFO Channel {ch:02d}/0 : "
        f"{rank}[{rank}] -> {rank + ranks}[{rank}] [send] via {transport}\n"
        for rank in range(ranks)
        for ch in range(channels)
    )


@pytest.mark.parametrize(
    ("variables", "across", "expected"),
    [
        ({}, True, DOCTOR_NCCL_DEBUG),
        ({"NCCL_DEBUG_SUBSYS": "ALL"}, True, DOCTOR_NCCL_DEBUG),  # inert without NCCL_DEBUG
        ({"NCCL_DEBUG": "WARN"}, True, {}),
        ({"NCCL_DEBUG": "INFO"}, True, {}),
        ({"NCCL_DEBUG_FILE": "/scratch/nccl.%h.%p"}, True, {}),
        ({}, False, {}),
    ],
)
def test_the_doctor_asks_for_nccl_info_only_where_the_user_did_not_decide(
    variables: dict[str, str], across: bool, expected: dict[str, str]
) -> None:
    assert doctor_nccl_env(variables, across) == expected


@pytest.mark.parametrize(
    ("gpus", "backend", "env", "nodes", "expected"),
    [
        (8, None, {}, TWO_NODES, DOCTOR_NCCL_DEBUG),
        (8, "nccl", {}, TWO_NODES, DOCTOR_NCCL_DEBUG),
        (8, "gloo", {}, TWO_NODES, {}),  # gloo asked for: no NCCL
        (0, None, {}, TWO_NODES, {}),  # CPU nodes: gloo
        (8, None, {"NCCL_DEBUG": "WARN"}, TWO_NODES, {}),
        (8, None, {}, dataclasses.replace(TWO_NODES, nnodes=1, min_nodes=1), {}),
    ],
)
def test_the_job_plan_sets_nccl_debug_for_nccl_between_nodes(
    gpus: int,
    backend: str | None,
    env: dict[str, str],
    nodes: NodePlan,
    expected: dict,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster, "nccl_conf_variables", lambda: {})  # this machine's conf aside
    plan = PlanFacts(backend=backend, nodes=nodes, timeout_s=60.0)
    config = _job_config(plan, gpus, 60.0, "python3", None, EnvFacts(env))
    assert dict(config.doctor_env) == expected
    checks = launch.preflight(dataclasses.replace(config, master_addr="127.0.0.1"))
    assert dict(launch.planned_facts(config, checks)["doctor_env"]) == expected
    assert dict(config.extra_env) == {}  # the doctor's logging is no predicted fix


def test_the_lines_are_kept_apart_from_the_tail_and_bounded(tmp_path: Path) -> None:
    ib = lines.ROCE_WITH_GDR + channel_lines("dgxh100-4", 8, 32, "NET/IB/0/GDRDMA") * 20
    log = tmp_path / "torchrun.log"
    own = "rank 0: bandwidth sweep done\nTraceback (most recent call last):\nRuntimeError: x\n"
    log.write_text(ib + "x" * 300_000 + "\n" + own)
    tail, kept = split_output(log, 64 * 1024)
    assert "NCCL INFO" not in tail and tail.endswith(own) and len(tail) <= 64 * 1024
    assert 0 < len(kept) <= MAX_LINES and all(len(line) <= MAX_LINE_CHARS for line in kept)
    assert all(line.startswith("NCCL INFO") for line in kept)  # no host:pid:tid prefix
    whole, apart = nccl_net(ib), nccl_net("\n".join(kept))
    assert (apart.network, apart.gdr, apart.via) == (whole.network, whole.gdr, whole.via)
    assert apart.ib_devices == whole.ib_devices == ("[0]mlx5_10:1/RoCE", "[1]mlx5_11:1/RoCE")


def test_endless_output_without_newlines_stays_bounded(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    distinct = "".join(f"h:1:1 [0] NCCL INFO message {'ab'[i % 2] * (i + 1)}\n" for i in range(500))
    log.write_bytes(distinct.encode() + b"\x1b[31m" * 400_000)
    tail, kept = split_output(log, 4096)
    assert len(kept) == MAX_LINES and 0 < len(tail.encode()) <= 4096 * 4


def test_without_the_doctors_nccl_debug_the_output_is_as_before(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text(lines.SOCKETS_NO_DEVICE)
    config = launch.JobConfig(nproc=2)  # the user's own NCCL_DEBUG=INFO, or a gloo job
    assert launch._output(log, config) == (lines.SOCKETS_NO_DEVICE, ())
    asked = dataclasses.replace(config, doctor_env=DOCTOR_NCCL_DEBUG)
    tail, kept = launch._output(log, asked)
    assert tail == "" and len(kept) == len(lines.SOCKETS_NO_DEVICE.splitlines())


def recorded_nccl(
    tail: str, kept: tuple[str, ...], doctor_env: dict, env: dict
) -> list[ProbeResult]:
    report = report_from_json(
        json.loads((JOBS / "isolate-recorded-healthy-node0.json").read_text())
    )
    results = []
    for result in report.probes:
        if result.probe == "job":
            job = dataclasses.replace(
                result.facts,
                backend="nccl",
                output_tail=tail,
                nccl_info=kept,
                doctor_env=doctor_env,
            )
            result = dataclasses.replace(result, facts=job)
        if result.probe == "env":
            result = dataclasses.replace(result, facts=EnvFacts(env))
        results.append(result)
    return results


def test_the_ladder_reads_the_kept_lines(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text(lines.IB_FOUND_BUT_SOCKETS)
    _, kept = split_output(log, 1024)
    rungs = {r.name: r for r in ladder(FactSet.of(recorded_nccl("", kept, DOCTOR_NCCL_DEBUG, {})))}
    assert rungs["nccl-socket"].state == PASSED and rungs["nccl-fabric"].state == FAILED


@pytest.mark.parametrize(
    ("doctor_env", "env", "named"),
    [
        (DOCTOR_NCCL_DEBUG, {}, "NCCL_DEBUG=INFO"),
        ({}, {"NCCL_DEBUG": "WARN"}, "NCCL_DEBUG=WARN"),
        ({}, {"NCCL_DEBUG_FILE": "/scratch/nccl.log"}, "NCCL_DEBUG_FILE"),
    ],
)
def test_rungs_not_read_say_which_setting_kept_them_unread(
    doctor_env: dict, env: dict, named: str
) -> None:
    rungs = ladder(FactSet.of(recorded_nccl("", (), doctor_env, env)))
    unread = [r for r in rungs if r.name in ("nccl-fabric", "gpudirect", "nvls")]
    assert {r.state for r in unread} == {NOT_RUN}
    assert all(named in r.why for r in unread)


def test_the_kept_lines_travel_in_the_report_and_are_redacted(tmp_path: Path) -> None:
    log = tmp_path / "torchrun.log"
    log.write_text(lines.SOCKETS_NO_DEVICE + lines.IB_WITHOUT_GDR)
    _, kept = split_output(log, 1024)
    assert any("10.220.178.201" in line for line in kept)
    results = recorded_nccl("", kept, DOCTOR_NCCL_DEBUG, {})
    job = next(r for r in results if r.probe == "job")
    again = probe_from_json(to_jsonable(probe_to_json(job)))
    assert again.facts.nccl_info == kept and dict(again.facts.doctor_env) == DOCTOR_NCCL_DEBUG
    report = report_from_json(
        json.loads((JOBS / "isolate-recorded-healthy-node0.json").read_text())
    )
    report = dataclasses.replace(report, probes=tuple(results))
    for fmt in ("json", "markdown"):
        shown = render(report, fmt, redact_hosts=True)
        assert "10.220.178.201" not in shown and "192.168.11.1" not in shown
    assert "<ip>" in render(report, "json", redact_hosts=True)


def test_the_ranks_variables_stay_the_users_own() -> None:
    """Node 0's doctor set NCCL_DEBUG=INFO; node 1's user set NCCL_DEBUG=WARN (its doctor set
    nothing): node 0's ranks lose the doctor's two, node 1's keep the user's."""
    from ddp_doctor.facts.job import Identity, JobFacts, Preflight
    from ddp_doctor.readings.nccl_debug import without_doctor_env
    from ddp_doctor.run.cluster_view import _doctor_env_of

    doctor_set = {**DOCTOR_NCCL_DEBUG, "NCCL_SOCKET_IFNAME": "eth0"}
    ranks = (
        Identity(0, 2, 0, "node0", 1, "cuda:0", variables=doctor_set, group_rank=0),
        Identity(1, 2, 0, "node1", 2, "cuda:0", variables={"NCCL_DEBUG": "WARN"}, group_rank=1),
    )
    local = JobFacts(
        launched=True,
        preflight=Preflight("node0", "10.0.0.1", None, 29500, None, False),
        identities=ranks,
        doctor_env=DOCTOR_NCCL_DEBUG,
    )
    nodes = {"0": {"doctor_env": DOCTOR_NCCL_DEBUG}, "1": {"doctor_env": {}}}
    kept = without_doctor_env(ranks, _doctor_env_of(local, {"nodes": nodes}))
    seen = {i.rank: dict(i.variables) for i in kept}
    assert seen == {0: {"NCCL_SOCKET_IFNAME": "eth0"}, 1: {"NCCL_DEBUG": "WARN"}}


def test_an_nccl_conf_that_decides_the_logging_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = {"NCCL_DEBUG_FILE": ("/scratch/nccl.%h.%p", "/etc/nccl.conf")}
    monkeypatch.setattr(cluster, "nccl_conf_variables", lambda: conf)
    plan = PlanFacts(nodes=TWO_NODES, timeout_s=60.0)
    config = _job_config(plan, 8, 60.0, "python3", None, EnvFacts({}))
    assert dict(config.doctor_env) == {}
    assert config.nccl_logging is not None and "/etc/nccl.conf" in config.nccl_logging
    results = recorded_nccl("", (), {}, {})
    job = next(r for r in results if r.probe == "job")
    job = dataclasses.replace(
        job, facts=dataclasses.replace(job.facts, nccl_logging=config.nccl_logging)
    )
    rungs = ladder(FactSet.of([r if r.probe != "job" else job for r in results]))
    assert all("/etc/nccl.conf" in r.why for r in rungs if r.name in ("nccl-fabric", "nvls"))


def test_nccl_conf_files_are_read_as_nccl_reads_them(tmp_path: Path) -> None:
    own, etc = tmp_path / "my.conf", tmp_path / "etc.conf"
    own.write_text("# NCCL_DEBUG=TRACE\nNCCL_DEBUG=WARN\nNCCL_IB_HCA=mlx5\n")
    etc.write_text("NCCL_DEBUG=INFO\nNCCL_DEBUG_FILE=/var/log/nccl.%p\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_DEBUG=VERSION\n")
    found = nccl_conf_variables({"NCCL_CONF_FILE": str(own)}, etc, str(home))
    assert found == {
        "NCCL_DEBUG": ("WARN", str(own)),  # the first file wins, as NCCL's setenv(..., 0)
        "NCCL_DEBUG_FILE": ("/var/log/nccl.%p", str(etc)),
    }
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)  # a special file never blocks the doctor
    nowhere = str(tmp_path / "nowhere")
    assert nccl_conf_variables({"NCCL_CONF_FILE": str(fifo)}, tmp_path / "none", nowhere) == {}
    assert nccl_conf_variables({}, tmp_path / "none", str(home)) == {
        "NCCL_DEBUG": ("VERSION", str(home / ".nccl.conf"))
    }
