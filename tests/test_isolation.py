"""`run --isolate`'s round scheduler (patient/pair_rounds.py) on 64 simulated nodes whose pair
outcomes come from a model (each node's link speed, and whether it connects at all), and the
doctor's side: the rounds settled into facts, DDP219's exclude list and DDP220."""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping

import pytest

from ddp_doctor.facts.cluster import ClusterFacts, ClusterNode, PairTest
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus
from ddp_doctor.patient.pair_rounds import SLOW, Outcome, Pair, isolate, max_rounds
from ddp_doctor.readings.isolation import exclude_forms, spread
from ddp_doctor.run.isolation import isolation_facts

FAST_GBPS, SLOW_GBPS = 10.0, 0.0025  # several Gbit/s, and 20 Mbit/s


class Model:
    """Each node's link; a pair runs at its slower node's speed, and fails to connect if
    either node drops connections."""

    def __init__(self, nodes: int, slow: set[int], unreachable: set[int]) -> None:
        self.nodes, self.slow, self.unreachable = nodes, slow, unreachable
        self.tests: list[PairTest] = []
        self.median: float | None = None

    def speed(self, pair: Pair) -> float:
        return min(SLOW_GBPS if n in self.slow else FAST_GBPS for n in pair)

    def run_round(self, pairs: list[Pair]) -> Mapping[Pair, Outcome]:
        seen = [n for pair in pairs for n in pair]
        assert len(seen) == len(set(seen)), "a node in two pairs of one round"
        number = 1 + max((t.round for t in self.tests), default=0)
        tests = []
        for pair in pairs:
            if set(pair) & self.unreachable:
                tests.append(PairTest(pair, number, connected=False, error="timed out"))
            else:
                tests.append(PairTest(pair, number, True, exact=True, gbps=self.speed(pair)))
        self.tests += tests
        measured = [t.gbps for t in tests if t.gbps is not None]
        if self.median is None and measured:  # judged against the first measured median
            self.median = statistics.median(measured)
        return {t.nodes: self.outcome(t) for t in tests}

    def outcome(self, test: PairTest) -> Outcome:
        if not test.connected:
            return False
        return True if (test.gbps or 0) >= 0.5 * (self.median or 0) else SLOW


@pytest.mark.parametrize("seed", range(20))
def test_64_nodes_settle_in_log_rounds_with_the_bad_ones_named(seed: int) -> None:
    chooser = random.Random(seed)
    bad = set(chooser.sample(range(64), chooser.randint(0, 12)))
    unreachable = set(chooser.sample(sorted(bad), len(bad) // 2)) if bad else set()
    model = Model(64, bad - unreachable, unreachable)
    state = isolate(64, model.run_round)
    assert state.bad == bad and not state.suspects
    assert len(state.rounds) <= max_rounds(64) == 10  # 3 + one confirmation + log2(64)
    facts = isolation_facts(64, model.tests)
    assert set(facts.bad) == bad and facts.unsettled == ()


def test_a_healthy_cluster_is_one_round() -> None:
    model = Model(64, set(), set())
    state = isolate(64, model.run_round)
    assert len(state.rounds) == 1 and state.good == set(range(64))


def test_half_the_nodes_bad_still_settles() -> None:
    # every round-1 pair fails: suspects must meet each other first (with connections: against
    # the median, a slow half of the nodes would be the median itself)
    bad = set(range(1, 64, 2))
    model = Model(64, set(), bad)
    state = isolate(64, model.run_round)
    assert state.bad == bad and len(state.rounds) <= max_rounds(64)


def test_an_odd_node_out_is_tested_in_round_two_and_confirmed_in_three() -> None:
    model = Model(5, {4}, set())
    state = isolate(5, model.run_round)
    assert state.bad == {4} and state.rounds[1:] == [[(0, 4)], [(1, 4)]]


def test_a_pair_slow_once_names_no_node() -> None:
    """A moment's load slows one round-1 pair: its nodes are retested beside good nodes, pass,
    and nothing is named (a cut connection is named at once: it is no moment's load)."""
    outcomes = iter([{(0, 1): True, (2, 3): SLOW}, {(0, 2): True, (1, 3): True}])
    state = isolate(4, lambda pairs: next(outcomes))
    assert state.good == {0, 1, 2, 3} and not state.bad and not state.suspects
    cut = iter([{(0, 1): True, (2, 3): False}, {(0, 2): False, (1, 3): True}])
    assert isolate(4, lambda pairs: next(cut)).bad == {2}


def cluster_with(tests: list[PairTest], nodes: int) -> FactSet:
    hosts = [f"node{n}" for n in range(nodes)]
    cluster = ClusterFacts(
        nnodes=nodes,
        node_rank=0,
        whole=True,
        nodes=tuple(ClusterNode(n, hosts[n], (n,), reported=True) for n in range(nodes)),
        isolation=isolation_facts(nodes, tests),
    )
    return [ProbeResult("cluster", ProbeStatus.OK, cluster, 0.0)]


def test_ddp219_names_the_throttled_and_the_firewalled_node_with_exclude_lists() -> None:
    model = Model(4, {2}, {3})
    isolate(4, model.run_round)
    findings = [f for f in judge(cluster_with(model.tests, 4)) if f.code.startswith("DDP2")]
    (found,) = [f for f in findings if f.code == "DDP219"]
    assert found.evidence["hosts"] == ["node2", "node3"]
    assert found.evidence["srun"] == "--exclude=node[2-3]"
    assert any("cannot connect" in part and "node 3" in part for part in found.message.split(";"))
    assert "DDP220" not in {f.code for f in findings}


def test_every_pair_passing_is_silent_and_gives_the_spread() -> None:
    model = Model(4, set(), set())
    isolate(4, model.run_round)
    assert {f.code for f in judge(cluster_with(model.tests, 4))} & {"DDP219", "DDP220"} == set()
    assert spread(isolation_facts(4, model.tests)) == (FAST_GBPS, FAST_GBPS, FAST_GBPS)


def test_a_pair_that_fails_only_together_is_ddp220() -> None:
    tests = [
        PairTest((0, 1), 1, connected=False, error="refused"),
        PairTest((2, 3), 1, True, True, 10.0),
        PairTest((0, 2), 2, True, True, 10.0),
        PairTest((1, 3), 2, True, True, 10.0),
    ]
    codes = [f.code for f in judge(cluster_with(tests, 4))]
    assert "DDP220" in codes and "DDP219" not in codes


def test_exclude_forms_for_every_scheduler() -> None:
    forms = exclude_forms(["node17", "node203"])
    assert forms["srun"] == "--exclude=node[17,203]"
    assert forms["hostfile"] == "grep -v -x -e node17 -e node203 hostfile > hostfile.good"
    assert forms["kubernetes"].startswith("kubectl taint nodes node17 node203 ")


def test_the_cluster_part_says_every_pair_passed_with_the_spread() -> None:
    from ddp_doctor.codec import to_jsonable
    from ddp_doctor.render.cluster_table import render_cluster_text

    model = Model(4, set(), set())
    isolate(4, model.run_round)
    cluster = to_jsonable(cluster_with(model.tests, 4)[0].facts)
    text = render_cluster_text(cluster, None, None)
    assert "every pair passed (2 pairs in 1 rounds)" in text


def test_a_pair_slow_once_is_said_so_and_is_no_finding() -> None:
    from ddp_doctor.codec import to_jsonable
    from ddp_doctor.render.cluster_table import isolation_line

    tests = [
        PairTest((0, 1), 1, True, True, 6.0),
        PairTest((2, 3), 1, True, True, 1.0),  # under half of round 1's median (3.5)
        PairTest((0, 2), 2, True, True, 6.0),
        PairTest((1, 3), 2, True, True, 6.0),
    ]
    facts = isolation_facts(4, tests)
    assert facts.bad == () and facts.unsettled == () and facts.median_gbps == 3.5
    assert {f.code for f in judge(cluster_with(tests, 4))} & {"DDP219", "DDP220"} == set()
    calm = isolation_facts(4, [PairTest(t.nodes, t.round, True, True, 6.0) for t in tests])
    # the report says that a pair was slow once (its wording is the golden files' business)
    assert isolation_line(to_jsonable(facts)) != isolation_line(to_jsonable(calm))
