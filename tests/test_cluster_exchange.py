"""How a multi-node run's facts travel: every rank's journal to rank 0 and node 0's verdict
back, through a real TCPStore (the ranks' side, cluster_share.py, run in threads here), and the
doctor's side (cluster_exchange.py) that answers rank 0 while the ranks wait."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ddp_doctor.patient.identity import fingerprint_variables, mapped_libraries
from ddp_doctor.patient.journal import Journal
from ddp_doctor.probes.job import exchange as cluster_exchange
from ddp_doctor.probes.job.exchange import ClusterExchange
from ddp_doctor.probes.job.rendezvous import Rendezvous
from ddp_doctor.probes.job.results import local_rank_numbers, rank_facts

torch = pytest.importorskip("torch")
from ddp_doctor.patient import cluster_share  # noqa: E402  (after the torch check)

pytestmark = pytest.mark.slow  # real jobs, subprocess runs or wheel builds


def placement(rank: int, node: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "world_size": 2,
        "local_rank": 0,
        "local_world_size": 1,
        "group_rank": node,
        "group_world_size": 2,
        "host": f"node{node}",
    }


@pytest.fixture
def store_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    server = torch.distributed.TCPStore(
        "127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False
    )
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    yield server


def node_folder(root: Path, node: int) -> tuple[Path, Path]:
    folder = root / f"node{node}"
    folder.mkdir()
    (folder / "node.json").write_text(json.dumps({"host": f"node{node}", "probes": []}))
    journal = Journal(folder / f"rank{node}.jsonl")
    journal.note("placement", **placement(node, node))
    journal.start("init")
    journal.end("init", ok=True, seconds=0.1, data={"backend": "gloo"})
    return folder, journal.path


def test_journals_reach_rank_0_and_the_verdict_comes_back(
    store_server: Any, tmp_path: Path
) -> None:
    folders = [node_folder(tmp_path, node) for node in (0, 1)]
    answered: list[dict] = []

    def node0_doctor() -> None:  # what ClusterExchange.poll does on node 0
        cluster = folders[0][0] / "cluster.json"
        while not cluster.exists():
            time.sleep(0.02)
        answered.append(json.loads(cluster.read_text()))
        (folders[0][0] / "verdict.json").write_text(json.dumps({"host": "node0", "findings": []}))

    threads = [threading.Thread(target=node0_doctor)]
    for node, (folder, journal) in enumerate(folders):
        args = (torch, placement(node, node), journal, folder, 5.0)
        threads.append(threading.Thread(target=cluster_share.share, args=args))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    (document,) = answered
    assert sorted(document["journals"]) == ["0", "1"] and sorted(document["nodes"]) == ["0", "1"]
    assert document["journals"]["1"]["host"] == "node1"
    assert document["journals"]["1"]["records"][0]["event"] == "placement"
    verdict = json.loads((folders[1][0] / "verdict.json").read_text())
    assert verdict == {"host": "node0", "findings": []}


def test_rank_0_gives_up_on_a_rank_that_never_posts(store_server: Any, tmp_path: Path) -> None:
    folder, journal = node_folder(tmp_path, 0)
    (folder / "verdict.json").write_text("{}")
    started = time.monotonic()
    cluster_share.share(torch, placement(0, 0), journal, folder, 1.0)
    assert time.monotonic() - started < 5
    document = json.loads((folder / "cluster.json").read_text())
    assert sorted(document["journals"]) == ["0"] and document["world_size"] == 2


def test_a_node_without_a_verdict_stops_waiting(store_server: Any, tmp_path: Path) -> None:
    folder, journal = node_folder(tmp_path, 1)
    started = time.monotonic()
    cluster_share.share(torch, placement(1, 1), journal, folder, 0.5)
    assert time.monotonic() - started < 8
    assert not (folder / "verdict.json").exists()


# --- the doctor's side -----------------------------------------------------------------------
def test_the_doctor_answers_rank_0_once(tmp_path: Path) -> None:
    decided: list[Any] = []

    def decide(document: Any) -> dict:
        decided.append(document)
        return {"host": "node0", "findings": [{"code": "DDP306"}]}

    exchange = ClusterExchange({"host": "node0", "probes": []}, decide)
    folder = exchange.prepare(tmp_path / "cluster")
    assert json.loads((folder / "node.json").read_text())["host"] == "node0"
    exchange.poll()
    assert decided == []  # nothing from rank 0 yet
    (folder / "cluster.json").write_text(json.dumps({"world_size": 2}))
    exchange.poll()
    exchange.poll()
    assert decided == [{"world_size": 2}]
    exchange.finish()
    assert exchange.verdict == {"host": "node0", "findings": [{"code": "DDP306"}]}


def test_a_torchrun_left_in_its_exit_barrier_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_exchange, "EXIT_BARRIER_GRACE_S", 0.3)
    monkeypatch.setattr(cluster_exchange, "CHECK_EVERY_S", 0.0)
    child = "import subprocess, sys, time; subprocess.run([sys.executable, '-c', 'import time; time.sleep(1)']); time.sleep(30)"
    agent = subprocess.Popen([sys.executable, "-c", child])
    exchange = ClusterExchange({}, lambda document: {})
    try:
        deadline = time.monotonic() + 20
        while not exchange.only_exit_barrier_left(agent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.monotonic() < deadline
        assert agent.poll() is None  # the "agent" itself still waits: only its ranks are gone
    finally:
        agent.kill()
        agent.wait()


def test_no_release_before_any_rank_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_exchange, "EXIT_BARRIER_GRACE_S", 0.0)
    monkeypatch.setattr(cluster_exchange, "CHECK_EVERY_S", 0.0)
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        exchange = ClusterExchange({}, lambda document: {})
        assert not any(exchange.only_exit_barrier_left(agent.pid) for _ in range(5))
    finally:
        agent.kill()
        agent.wait()


def test_connections_to_the_store_port_are_read_from_proc(tmp_path: Path) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue\n"
    (tmp_path / "tcp").write_text(
        header
        + "   0: 0100007F:1F90 0200000A:D431 01 00000000:00000000\n"  # 10.0.0.2 -> :8080
        + "   1: 0100007F:1F90 0300000A:D432 0A 00000000:00000000\n"  # listening, not a peer
        + "   2: 0100007F:1F91 0400000A:D433 01 00000000:00000000\n"  # another port
    )
    (tmp_path / "tcp6").write_text(
        header
        + "   0: 00000000000000000000000000000000:1F90 0000000000000000FFFF00000500000A:D434 01 0\n"
    )
    assert cluster_exchange.connected_to(8080, tmp_path) == ["10.0.0.2", "10.0.0.5"]


# --- what the ranks record -------------------------------------------------------------------
def test_a_node_knows_its_ranks_before_and_after_the_rendezvous(tmp_path: Path) -> None:
    static = Rendezvous("static", 2, 2, "node0", 1, "r", 10, node_rank=1)
    assert local_rank_numbers(tmp_path, 2, static) == [2, 3]
    assert local_rank_numbers(tmp_path, 2, None) == [0, 1]
    c10d = Rendezvous("c10d", 2, 2, "node0", 1, "r", 10)
    assert local_rank_numbers(tmp_path, 2, c10d) == []
    (tmp_path / "rank4.jsonl").write_text("")
    assert local_rank_numbers(tmp_path, 2, c10d) == [4]


def test_a_rank_says_where_torchrun_put_it() -> None:
    facts = rank_facts(3, [{"event": "placement", **placement(3, 1)}], exit_code=None)
    assert (facts.rank, facts.node_rank, facts.host, facts.stages) == (3, 1, "node1", ())


def test_the_fingerprint_reads_maps_and_variables(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n"
        "7f01-7f02 r--p 00001000 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/libnccl.so.2.21.5\n"
        "7f03-7f04 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r-xp 00000000 08:01 3 /usr/lib/libc.so.6\n"
    )
    assert mapped_libraries("libnccl", str(maps)) == [
        "/venv/nvidia/nccl/lib/libnccl.so.2",
        "/usr/lib/libnccl.so.2.21.5",
    ]
    assert mapped_libraries("libnccl", str(tmp_path / "none")) == []
    chosen = fingerprint_variables(
        {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "eth1", "HOME": "/"}
    )
    assert chosen == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "INFO"}
