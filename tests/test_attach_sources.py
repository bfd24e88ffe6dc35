"""What torch and NCCL already know, read by attach from fake endpoints that behave as the
documented ones (tests/fake_nccl_rank.py): a flight-recorder dump asked for through the job's
own pipe, and NCCL RAS's JSON report; plus the readers on the fixture files alone."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ddp_doctor.attach.verdict import HUNG, verdict_of
from ddp_doctor.facts.attach import AttachedRank, AttachFacts, RankSample, ThreadStack
from ddp_doctor.facts.trace import Site
from ddp_doctor.flightrec.dumps import read_dump
from ddp_doctor.probes.attach import ras

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "attach"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def fake_ranks(
    argv: dict[int, list[str]], envs: dict[int, dict[str, str]], tmp_path: Path
) -> Iterator[list[subprocess.Popen]]:
    """Ranks 0 and 1 of tests/fake_nccl_rank.py, started and waited for (each touches its
    ready file), then killed with whatever they started (the debug server's workers too)."""
    import psutil

    ranks = [
        subprocess.Popen(
            [sys.executable, str(HERE / "fake_nccl_rank.py"), str(rank), *argv[rank]],
            env=envs[rank],
        )
        for rank in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "the fake ranks did not start"
            time.sleep(0.05)
        yield ranks
    finally:
        for rank in ranks:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(rank.pid).children(recursive=True):
                    child.kill()
            rank.kill()
            rank.wait(timeout=10)


def test_ras_report_with_the_missing_comma_of_nccl_2_28_9() -> None:
    facts = ras.parse((FIXTURES / "ras" / "one_missing.json").read_text(), "localhost:28028")
    assert facts.nccl_version == "2.28.9"
    [communicator] = facts.communicators
    assert communicator.size == 2
    missing = [r for r in communicator.ranks if r.missing]
    assert [(r.rank, r.unresponsive, r.host) for r in missing] == [(1, True, "10.0.0.2")]
    assert ras.address_of("[::1]:9000") == ("::1", 9000)
    assert ras.address_of(None) == ("localhost", 28028)


def test_flight_recorder_entries_become_the_analysis_records() -> None:
    dump = read_dump(FIXTURES / "flight_recorder" / "rank0.json")
    calls = list(dump.entries)  # read by the one entry parser
    assert [c.seq for c in calls] == [1, 2, 3, 4, 5]
    assert calls[-1].state == "pending" and calls[-1].op == "all_reduce"


def test_verdict_takes_the_sequence_number_from_flight_recorders() -> None:
    records = {
        rank: read_dump(FIXTURES / "flight_recorder" / f"rank{rank}.json").entries
        for rank in (0, 1)
    }
    waiting = (Site("/v/lib/site-packages/torch/distributed/distributed_c10d.py", 9, "all_reduce"),
               Site("/a/train.py", 12, "<module>"))  # fmt: skip
    elsewhere = (Site("/a/train.py", 30, "load"),)

    def rank(number: int, frames: tuple[Site, ...]) -> AttachedRank:
        samples = tuple(
            RankSample(at, "sleeping", 1.0, None, 0.5, 3, (ThreadStack(1, "MainThread", True, frames),))
            for at in (0.0, 2.0)
        )  # fmt: skip
        return AttachedRank(pid=10 + number, rank=number, samples=samples,
                            flight_recorder=records[number])  # fmt: skip

    facts = AttachFacts("h", "job", "torchrun", ranks=(rank(0, waiting), rank(1, elsewhere)))
    verdict = verdict_of(facts)
    assert verdict.kind == HUNG and verdict.seq == 5 and verdict.missing == (1,)


def test_attach_asks_the_pipe_for_a_dump_and_reads_ras(invoke, tmp_path: Path) -> None:
    run_id = f"fake-{secrets.token_hex(4)}"
    port = _free_port()
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCH_FR_BUFFER_SIZE": "100",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "pipe_"),
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / "dump_"),
        "NCCL_RAS_ADDR": f"127.0.0.1:{port}",
    }
    argv = {
        rank: [str(port if rank == 0 else 0), str(tmp_path / f"ready{rank}")] for rank in (0, 1)
    }
    envs = {rank: {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)} for rank in (0, 1)}
    with fake_ranks(argv, envs, tmp_path) as ranks:
        result = invoke("attach", "--job", run_id, "--interval", "0.5", "--format", "json")
        assert all(rank.poll() is None for rank in ranks)  # untouched
    report = json.loads(result.output)
    facts = report["probes"][0]["facts"]
    got = {r["rank"]: r for r in facts["ranks"]}
    assert [c["seq"] for c in got[0]["flight_recorder"]] == [1, 2, 3, 4, 5]
    assert got[0]["flight_recorder_from"] == "dump requested through the job's pipe"
    # the fixture's entries 1-5 were created over 19 ms: the pace of a fresh dump
    assert got[0]["flight_recorder_pace"] == {"group": "0", "collectives": 4, "span_s": 0.019}
    assert facts["ras"]["communicators"][0]["hash"] == "0x6a1f20c4d93b7e15"
    ras_finding = next(f for f in report["findings"] if f["code"] == "DDP705")
    assert ras_finding["evidence"]["missing"] == [1]
    sources = {s["name"]: s["status"] for s in facts["sources"]}
    assert sources["flight-recorder"] == "read" and sources["nccl-ras"] == "read"


def test_attach_reads_the_debug_server_frontend_of_rank_0(invoke, tmp_path: Path) -> None:
    run_id = f"fake-{secrets.token_hex(4)}"
    debug_port = _free_port()
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
           "TORCHELASTIC_RUN_ID": run_id, "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "p_"),
           "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(tmp_path / "d_")}  # fmt: skip
    argv = {
        rank: ["0", str(tmp_path / f"ready{rank}"), str(debug_port if rank == 0 else 0)]
        for rank in (0, 1)
    }
    envs = {rank: {**env, "RANK": str(rank)} for rank in (0, 1)}
    with fake_ranks(argv, envs, tmp_path):
        result = invoke("attach", "--job", run_id, "--interval", "0.5", "--format", "json")
    facts = json.loads(result.output)["probes"][0]["facts"]
    got = {r["rank"]: r for r in facts["ranks"]}
    assert [c["seq"] for c in got[1]["flight_recorder"]] == [1, 2, 3, 4]
    assert got[1]["flight_recorder_from"] == "torch debug server"
    assert got[1]["flight_recorder_pace"]["collectives"] == 3  # entries 1-4: its pace too
    assert {s["name"]: s["status"] for s in facts["sources"]}["debug-server"] == "read"
