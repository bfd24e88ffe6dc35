"""The job side of `run --isolate` without a job: the rounds coordinated through a store
(patient/isolate.py) by one thread per node on an in-memory store, each pair's outcome from a
model of the links; both nodes' views merged into one pair; the flag's usage error; and the
doctor's side reading rank 0's stage into IsolationFacts. The real pair tests on four
simulated hosts are tests/test_multinode_isolate.py (slow)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from test_cli_run import assert_clean_usage_error

from ddp_doctor.facts.job import RankFacts, StageRecord
from ddp_doctor.patient import isolate as job_side
from ddp_doctor.probes.job.launch import JobConfig, torchrun_argv
from ddp_doctor.run.cluster_view import isolation_of

FAST, SLOW = 5.0, 0.0025  # GB/s


class MemoryStore:
    """The calls of a TCPStore client that isolate.py makes, in memory, shared by threads."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.changed = threading.Condition()

    def set(self, key: str, value: str) -> None:
        with self.changed:
            self.values[key] = value.encode()
            self.changed.notify_all()

    def get(self, key: str) -> bytes:
        return self.values[key]

    def add(self, key: str, amount: int) -> int:
        with self.changed:
            total = int(self.values.get(key, b"0")) + amount
            self.values[key] = str(total).encode()
            self.changed.notify_all()
            return total

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        with self.changed:
            if not self.changed.wait_for(
                lambda: all(k in self.values for k in keys), timeout.total_seconds()
            ):
                raise TimeoutError(f"wait timeout after {timeout}, keys: {keys}")


class Links:
    """A pair test from a model: each node's own speed; `silent` nodes post nothing (a node
    whose first rank is stuck); `unreachable` ones never connect."""

    def __init__(self, slow=(), unreachable=(), silent=(), speeds=None) -> None:
        self.slow, self.unreachable, self.silent = set(slow), set(unreachable), set(silent)
        self.speeds = speeds or {}

    def test_pair(self, torch, store, prefix, nodes, node, device, connect_s, nbytes, window):
        if node in self.silent:
            time.sleep(0.5)
            raise _Stuck()
        if set(nodes) & self.unreachable:
            return {"node": node, "connected": False, "error": "PairTimeout: no answer"}
        speed = min(SLOW if n in self.slow else self.speeds.get(n, FAST) for n in nodes)
        return {"node": node, "connected": True, "exact": True, "gbps": speed}


class _Stuck(Exception):
    pass


def run_nodes(nodes: int, links: Links, monkeypatch: pytest.MonkeyPatch, budget: float = 10.0):
    monkeypatch.setattr(job_side, "test_pair", links.test_pair)
    store = MemoryStore()
    results: dict[int, Any] = {}

    def node(number: int) -> None:
        placement = {"rank": number, "local_rank": 0, "group_rank": number,
                     "group_world_size": nodes, "world_size": nodes}  # fmt: skip
        try:
            results[number] = job_side.isolate(None, store, placement, None, budget, 0.2, 1, 0.0)
        except _Stuck:
            store.add(job_side.ARRIVED, 0)

    threads = [threading.Thread(target=node, args=(n,), daemon=True) for n in range(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(budget + 5)
    assert not any(thread.is_alive() for thread in threads), "a node did not finish in time"
    return results


def test_a_slow_node_is_confirmed_in_three_rounds_and_every_node_stops(monkeypatch) -> None:
    results = run_nodes(4, Links(slow={2}), monkeypatch)
    summary = results[0]
    assert summary["bad"] == [2] and summary["unsettled"] == [] and summary["rounds"] == 3
    # slow beside good node 0, then once more beside good node 1 before it is named
    pairs = [tuple(p["nodes"]) for p in summary["pairs"]]
    assert pairs == [(0, 1), (2, 3), (0, 2), (1, 3), (1, 2)]
    assert all(results[n]["stop"] and results[n]["bad"] == [2] for n in (1, 2, 3))


def test_a_healthy_cluster_is_one_round_and_goes_on(monkeypatch) -> None:
    results = run_nodes(6, Links(), monkeypatch)
    assert results[0]["rounds"] == 1 and not results[0]["stop"]
    assert all(not results[n]["stop"] for n in range(1, 6))


def test_a_node_that_posts_nothing_is_an_outcome_not_a_hang(monkeypatch) -> None:
    results = run_nodes(4, Links(silent={3}), monkeypatch, budget=6.0)
    summary = results[0]
    assert 3 in summary["bad"]
    silent_pairs = [p for p in summary["pairs"] if 3 in p["nodes"]]
    assert silent_pairs and not any(p["connected"] for p in silent_pairs)


def test_both_views_make_one_pair() -> None:
    store = MemoryStore()
    store.set(f"{job_side.PREFIX}outcome/1/0", '{"connected": true, "exact": true, "gbps": 4}')
    store.set(f"{job_side.PREFIX}outcome/1/1", '{"connected": true, "exact": true, "gbps": 0.1}')
    store.set(f"{job_side.PREFIX}outcome/1/2", '{"connected": false, "error": "refused"}')
    until = time.monotonic() + 0.2
    row = job_side._pair_row(store, 1, (0, 1), until)
    assert (row["connected"], row["exact"], row["gbps"]) == (True, True, 0.1)
    row = job_side._pair_row(store, 1, (1, 2), until)
    assert (row["connected"], row["gbps"], row["error"]) == (False, None, "refused")
    row = job_side._pair_row(store, 1, (0, 3), time.monotonic() + 0.1)  # 3 posted nothing
    assert row["connected"] is False and "3" in row["error"]


def test_isolate_needs_several_nodes(invoke, monkeypatch) -> None:
    from ddp_doctor.probes import torch_info

    def forbidden(*_: Any, **__: Any) -> None:
        raise AssertionError("probed despite a usage error")

    monkeypatch.setattr(torch_info, "collect_torch", forbidden)
    assert_clean_usage_error(invoke("run", "--isolate"))
    assert_clean_usage_error(invoke("run", "--isolate", "--nnodes", "1"))
    two = ["--nnodes", "2", "--node-rank", "0", "--master-addr", "node0", "--master-port", "29500"]
    assert_clean_usage_error(invoke("run", "--isolate", "--no-jobs", *two))
    assert_clean_usage_error(invoke("run", "--isolate-slow-below", "0.2", *two))  # no --isolate
    assert_clean_usage_error(invoke("run", "--isolate", "--isolate-slow-below", "2", *two))


def test_the_job_is_told_its_budget_and_threshold(tmp_path) -> None:
    config = JobConfig(nproc=1, isolate_s=24.0, isolate_slow_below=0.1)
    argv = torchrun_argv(config, 29500, tmp_path, tmp_path)
    assert argv[argv.index("--isolate-s") + 1] == "24"
    assert argv[argv.index("--isolate-slow-below") + 1] == "0.1"
    assert "--isolate-s" not in torchrun_argv(JobConfig(nproc=1), 29500, tmp_path, tmp_path)


@pytest.fixture
def rank0_rows() -> Iterator[list[dict[str, Any]]]:
    yield [
        {"nodes": [0, 1], "round": 1, "connected": True, "exact": True, "gbps": FAST},
        {"nodes": [2, 3], "round": 1, "connected": False, "error": "PairTimeout"},
        {"nodes": [0, 2], "round": 2, "connected": False, "error": "PairTimeout"},
        {"nodes": [1, 3], "round": 2, "connected": True, "exact": True, "gbps": FAST},
        "not a row",
    ]


def test_node0_judges_by_the_threshold_the_job_used(rank0_rows) -> None:
    rows = [
        {"nodes": [0, 1], "round": 1, "connected": True, "exact": True, "gbps": FAST},
        {"nodes": [2, 3], "round": 1, "connected": True, "exact": True, "gbps": FAST / 4},
    ]
    for below, slow in ((0.5, True), (0.1, False)):
        data = {"pairs": rows, "slow_below": below}
        stage = StageRecord("isolate", ended=True, ok=True, data=data)
        facts = isolation_of((RankFacts(0, stages=(stage,)), RankFacts(1)), 4)
        assert facts is not None and facts.slow_below == below
        assert bool(facts.unsettled) == slow  # slow once, no round to retest: unsettled


def test_node0_reads_rank0s_pairs_into_facts(rank0_rows) -> None:
    stage = StageRecord("isolate", ended=True, ok=True, data={"pairs": rank0_rows})
    facts = isolation_of((RankFacts(0, stages=(stage,)), RankFacts(1)), 4)
    assert facts is not None and facts.bad == (2,) and facts.rounds == 2
    assert len(facts.pairs) == 4 and facts.median_gbps == FAST
    assert isolation_of((RankFacts(0),), 4) is None


def test_the_doctor_replays_the_rounds_as_node_0_decided_them(monkeypatch) -> None:
    """Node 0 judged round 1 against round 1's median (node 0's link at a fifth of the others
    passed then); against the final median it would fail, and a replay by the final median
    would leave nodes 0 and 2 unsettled instead of naming node 2."""
    from ddp_doctor.run.isolation import isolation_facts, pair_tests

    results = run_nodes(4, Links(unreachable={2}, speeds={0: FAST / 5}), monkeypatch)
    summary = results[0]
    assert summary["bad"] == [2] and summary["unsettled"] == []
    facts = isolation_facts(4, pair_tests(summary["pairs"]))
    assert list(facts.bad) == summary["bad"] and list(facts.unsettled) == summary["unsettled"]
