"""Which nodes to test together, round by round, to find the bad ones (`run --isolate`).

Every node is in at most one pair per round, so a round's pairs run in parallel. Round 1 pairs
neighbours; a pair that passes clears both nodes, one that fails makes both suspects. Later
rounds pair each suspect with a node already known good: a suspect that passes is good, one
that cannot connect or sums wrong beside a good node is bad, and one that is only slow there
is slow once more beside another good node (or, with one good node only, the same) before it
is bad, so one pair slowed by a moment's load names no node. The good
nodes at least double while suspects wait for a partner, so every suspect is settled in
O(log N) rounds. Where no node is known good yet, suspects are paired among themselves with a
new partner each round.

Pure functions of the outcomes so far: every node computes the same next round from what the
store says, with no coordinator. Standard library only.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Pair = tuple[int, int]
Outcome = bool | str  # True: passed; False: failed (cannot connect, wrong sum); SLOW
SLOW = "slow"  # connected and exact, but under the bandwidth threshold
CONFIRMATIONS = 2  # slow pairs beside good nodes that make a suspect bad


@dataclass
class Isolation:
    nodes: int
    good: set[int] = field(default_factory=set)
    bad: set[int] = field(default_factory=set)
    suspects: set[int] = field(default_factory=set)
    tried: set[Pair] = field(default_factory=set)  # pairs already tested
    strikes: dict[int, int] = field(default_factory=dict)  # slow pairs beside good nodes
    rounds: list[list[Pair]] = field(default_factory=list)

    @property
    def settled(self) -> bool:
        untested = set(range(self.nodes)) - self.good - self.bad - self.suspects
        return not self.suspects and not untested


def max_rounds(nodes: int) -> int:
    """The bound: round 1, then at most log2(N) rounds in which the good nodes double, two
    more for suspects that had to meet each other first, and one to confirm a failure."""
    return 3 + CONFIRMATIONS - 1 + max(1, nodes - 1).bit_length()


def first_round(nodes: int) -> list[Pair]:
    return [(a, a + 1) for a in range(0, nodes - 1, 2)]


def next_round(state: Isolation) -> list[Pair]:
    """The next round's pairs; [] when nothing is left to settle."""
    waiting = sorted(set(range(state.nodes)) - state.good - state.bad - state.suspects)
    waiting += sorted(state.suspects)  # the odd node out of round 1 first, then suspects
    partners = sorted(state.good)
    pairs: list[Pair] = []
    if partners:
        for node in waiting:
            if not partners:
                break
            # a suspect is confirmed beside another good node than the one it failed with
            partner = next((p for p in partners if _pair(node, p) not in state.tried), partners[0])
            partners.remove(partner)
            pairs.append(_pair(node, partner))
        return pairs
    # no good node yet: suspects meet suspects they have not met
    free = list(waiting)
    while free:
        node = free.pop(0)
        other = next((o for o in free if _pair(node, o) not in state.tried), None)
        if other is not None:
            free.remove(other)
            pairs.append(_pair(node, other))
    return pairs


def record(state: Isolation, outcomes: Mapping[Pair, Outcome]) -> None:
    """One round's outcomes (True: the pair passed every check; False: it failed one; SLOW:
    connected and exact, but too slow)."""
    state.rounds.append(sorted(outcomes))
    for (a, b), outcome in outcomes.items():
        state.tried.add(_pair(a, b))
        known_good = {a, b} & state.good
        if outcome is True:
            state.good |= {a, b}
            state.suspects -= {a, b}
        elif known_good and len(known_good) == 1:
            (other,) = {a, b} - known_good
            state.strikes[other] = state.strikes.get(other, 0) + 1
            if outcome != SLOW or state.strikes[other] >= CONFIRMATIONS:
                state.bad.add(other)
                state.suspects.discard(other)
            else:
                state.suspects.add(other)
        elif not known_good:
            state.suspects |= {a, b} - state.bad


def isolate(nodes: int, test_round: Callable[[list[Pair]], Mapping[Pair, Outcome]]) -> Isolation:
    """Every round until the nodes are settled or the bound is reached; `test_round` runs one
    round's pairs in parallel and says which passed. Suspects left at the bound stay so."""
    state = Isolation(nodes)
    pairs = first_round(nodes)
    if nodes == 1:
        state.suspects.add(0)
    while pairs and len(state.rounds) < max_rounds(nodes):
        record(state, test_round(pairs))
        pairs = next_round(state)
    return state


def reference_gbps(measured: Iterable[tuple[int, float]]) -> float | None:
    """The median bandwidth of the first round with measured pairs, from (round, GB/s) of the
    pairs that connected: round 1 has every node once, and later rounds retest suspects, whose
    slow pairs would drag a running median down."""
    found = list(measured)
    if not found:
        return None
    first = min(number for number, _ in found)
    return statistics.median(gbps for number, gbps in found if number == first)


def pair_outcome(
    connected: bool, exact: bool | None, gbps: float | None, reference: float | None,
    slow_below: float,
) -> Outcome:  # fmt: skip
    """Failed (no connection, a wrong sum), SLOW (under `slow_below` of the reference), or
    passed; a pair whose bandwidth or reference is unknown is judged by the first two only."""
    if not connected or exact is False:
        return False
    if gbps is None or reference is None or gbps >= slow_below * reference:
        return True
    return SLOW


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def pairs_of(rounds: Iterable[Iterable[Pair]]) -> list[Pair]:
    return [pair for one in rounds for pair in one]
