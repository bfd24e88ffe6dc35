"""The job side of `run --isolate`: each node's first rank tests its node in pairs, round by
round (pair_rounds.py), coordinated through the job's own store; node 0 decides each next
round from the outcomes.

Keys under `ddp_doctor/isolate/`:
  plan/R            node 0: round R's pairs as JSON (`[]`: no round R, the rounds are over)
  outcome/R/NODE    each tested node: its view of its pair (pair_test.test_pair)
  arrived           every rank adds 1 as it starts; round 1 waits (bounded) for all
  finished          node 0: every pair's outcome, the nodes settled, and whether to stop
The other ranks of every node wait for `finished` and stop with their node if a pair failed
(the whole-world stages would hang on a node that cannot connect, or crawl on a slow one).
Every wait is bounded by the stage's budget: a node that never posts is an outcome (cannot
connect), a node 0 that never decides ends the stage with an error. Standard library and
torch only.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .pair_rounds import (
    Isolation,
    Outcome,
    Pair,
    first_round,
    max_rounds,
    next_round,
    pair_outcome,
    record,
    reference_gbps,
)
from .pair_test import test_pair

PREFIX = "ddp_doctor/isolate/"
FINISHED = PREFIX + "finished"
ARRIVED = PREFIX + "arrived"
POLL_S = 0.05
# of round 1's median (pair_rounds.reference_gbps): the doctor replays the rounds with the same threshold
# and the same reference (run/isolation.py), so its report agrees with these decisions
SLOW_BELOW = 0.5
CONNECT_S = 8.0  # the most a pair may take to form its group
WINDOW_S = 0.5  # each way: transfers timed for about this long, the best counts


def run_isolation(
    torch: Any,
    placement: Mapping[str, Any],
    backend: str,
    budget_s: float,
    nbytes: int,
    slow_below: float = SLOW_BELOW,
) -> dict[str, Any]:
    """The stage: the job's store, this rank's device, then its part in the rounds."""
    from .cluster_share import connect_store

    store = connect_store(torch, budget_s)
    if store is None:
        raise RuntimeError("cannot reach the job's store to coordinate the pair tests")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", placement["local_rank"] % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    connect_s = min(CONNECT_S, max(2.0, budget_s / 8))
    return isolate(
        torch, store, placement, device, budget_s, connect_s, nbytes, WINDOW_S, slow_below
    )


def isolate(
    torch: Any,
    store: Any,
    placement: Mapping[str, Any],
    device: Any,
    budget_s: float,
    connect_s: float,
    nbytes: int,
    window_s: float,
    slow_below: float = SLOW_BELOW,
) -> dict[str, Any]:
    """This rank's part; the stage's data (node 0's first rank: every pair's outcome)."""
    deadline = time.monotonic() + budget_s
    store.add(ARRIVED, 1)
    if placement["local_rank"] != 0:
        return {"waited": True, **_finished(store, deadline)}
    node, nodes = placement["group_rank"], placement["group_world_size"]
    tester = _Tester(torch, store, node, device, connect_s, nbytes, window_s)
    if node == 0:
        _wait_for_everyone(
            store, placement["world_size"], min(deadline, time.monotonic() + 2 * connect_s)
        )
        return _coordinate(store, nodes, tester, deadline, slow_below)
    return {**_take_part(store, tester, deadline), **_finished(store, deadline)}


class _Tester:
    def __init__(
        self,
        torch: Any,
        store: Any,
        node: int,
        device: Any,
        connect_s: float,
        nbytes: int,
        window_s: float,
    ) -> None:
        self.torch, self.store, self.node, self.device = torch, store, node, device
        self.connect_s, self.nbytes, self.window_s = connect_s, nbytes, window_s

    @property
    def pair_bound_s(self) -> float:
        """How long node 0 waits for a round's outcomes after its own test."""
        return 4 * self.connect_s + 2 * (self.window_s + 3 * self.nbytes / 1.25e6)

    def run_round(self, number: int, pairs: list[Pair]) -> None:
        mine = next((p for p in pairs if self.node in p), None)
        if mine is None:
            return
        prefix = f"{PREFIX}group/{number}/{mine[0]}-{mine[1]}/"
        row = test_pair(
            self.torch, self.store, prefix, mine, self.node, self.device,
            self.connect_s, self.nbytes, self.window_s,
        )  # fmt: skip
        self.store.set(f"{PREFIX}outcome/{number}/{self.node}", json.dumps(row))


def _coordinate(
    store: Any, nodes: int, tester: _Tester, deadline: float, slow_below: float = SLOW_BELOW
) -> dict[str, Any]:
    """Node 0: plans each round, takes part, gathers the outcomes, decides the next."""
    state = Isolation(nodes)
    rows: list[dict[str, Any]] = []
    pairs = first_round(nodes)
    number = 1
    while pairs and len(state.rounds) < max_rounds(nodes) and time.monotonic() < deadline:
        store.set(f"{PREFIX}plan/{number}", json.dumps(pairs))
        tester.run_round(number, pairs)
        wait_until = min(deadline, time.monotonic() + tester.pair_bound_s)
        found = [_pair_row(store, number, pair, wait_until) for pair in pairs]
        rows += found
        record(state, {tuple(r["nodes"]): _outcome(r, rows, slow_below) for r in found})  # type: ignore[misc]
        pairs = next_round(state)
        number += 1
    store.set(f"{PREFIX}plan/{number}", "[]")
    summary = {
        "pairs": rows,
        "rounds": len(state.rounds),
        "bad": sorted(state.bad),
        "unsettled": sorted(state.suspects),
        "slow_below": slow_below,
        "stop": bool(state.bad or state.suspects),  # a pair slow once, then cleared, is no stop
    }
    store.set(FINISHED, json.dumps({k: v for k, v in summary.items() if k != "pairs"}))
    return summary


def _wait_for_everyone(store: Any, world_size: int, until: float) -> None:
    """Round 1 waits (bounded) until every rank has imported torch and arrived: a pair timed
    while other ranks still import would measure their CPU load, not its link."""
    while int(store.add(ARRIVED, 0)) < world_size and time.monotonic() < until:
        time.sleep(POLL_S)


def _take_part(store: Any, tester: _Tester, deadline: float) -> dict[str, Any]:
    number, tested = 1, 0
    while time.monotonic() < deadline:
        plan = _wait_get(store, f"{PREFIX}plan/{number}", deadline)
        if plan is None:
            return {"pairs_tested": tested, "error": "node 0 planned no next round in time"}
        pairs = [tuple(p) for p in json.loads(plan)]
        if not pairs:
            break
        tester.run_round(number, pairs)  # type: ignore[arg-type]
        tested += any(tester.node in p for p in pairs)
        number += 1
    return {"pairs_tested": tested}


def _pair_row(store: Any, number: int, pair: Pair, wait_until: float) -> dict[str, Any]:
    """The pair's outcome from both nodes' views: connected and exact only where both say so,
    the slower direction's bandwidth; a node that posted nothing in time did not connect."""
    views = [_wait_get(store, f"{PREFIX}outcome/{number}/{node}", wait_until) for node in pair]
    parsed = [_loads(view) for view in views]
    missing = [node for node, view in zip(pair, parsed, strict=True) if view is None]
    row: dict[str, Any] = {"nodes": list(pair), "round": number}
    if missing:
        row["connected"] = False
        row["error"] = f"node {missing[0]} posted no outcome in time"
        return row
    row["connected"] = all(view.get("connected") is True for view in parsed)  # type: ignore[union-attr]
    exact = [view.get("exact") for view in parsed]  # type: ignore[union-attr]
    row["exact"] = None if None in exact else all(exact)
    speeds = [view.get("gbps") for view in parsed]  # type: ignore[union-attr]
    numbers = [s for s in speeds if isinstance(s, (int, float))]
    row["gbps"] = min(numbers) if row["connected"] and numbers else None
    errors = [view.get("error") for view in parsed if view.get("error")]  # type: ignore[union-attr]
    row["error"] = errors[0] if errors else None
    return row


def _outcome(
    row: Mapping[str, Any], rows: list[dict[str, Any]], slow_below: float = SLOW_BELOW
) -> Outcome:
    measured = [
        (r["round"], r["gbps"]) for r in rows if r.get("connected") and r.get("gbps") is not None
    ]
    return pair_outcome(
        bool(row.get("connected")), row.get("exact"), row.get("gbps"),
        reference_gbps(measured), slow_below,
    )  # fmt: skip


def _finished(store: Any, deadline: float) -> dict[str, Any]:
    text = _wait_get(store, FINISHED, deadline)
    if text is None:
        return {"stop": True, "error": "node 0 gave no outcome of the pair tests in time"}
    found = _loads(text) or {}
    return {"stop": bool(found.get("stop", True)), "bad": found.get("bad") or []}


def _wait_get(store: Any, key: str, deadline: float) -> str | None:
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    with contextlib.suppress(Exception):
        store.wait([key], timedelta(seconds=left))
        return store.get(key).decode()
    return None


def _loads(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    with contextlib.suppress(ValueError):
        found = json.loads(text)
        return found if isinstance(found, dict) else None
    return None
