"""`run --isolate`'s coordination at scale: the real rounds of patient/isolate.py over a real
TCPStore, one thread and one store client per simulated node, each pair's outcome from a model
(bad nodes: half of them slow, half unreachable) instead of a real pair test. The clients
connect before the clock starts. It measures
what the doctor adds on top of the pair tests themselves: rounds and seconds of coordination
until node 0 has settled every node, and whether it named exactly the bad ones.

`python bench/bench_isolate.py --nodes 1024 --bad 5` prints a row per size from 16 nodes up,
then as its last line `isolate: N nodes, B bad: R rounds (bound K), coordination S s, named
exactly: yes|no`.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GROWTH = (16, 64, 256, 1024)
FAST, SLOW = 5.0, 0.0025


def modelled_pair(slow: set[int], unreachable: set[int]) -> Any:
    def test_pair(torch, store, prefix, nodes, node, device, connect_s, nbytes, window) -> dict:
        if set(nodes) & unreachable:
            return {"node": node, "connected": False, "error": "PairTimeout: modelled"}
        gbps = min(SLOW if n in slow else FAST for n in nodes)
        return {"node": node, "connected": True, "exact": True, "gbps": gbps}

    return test_pair


def run(nodes: int, bad: int, seed: int = 0) -> dict[str, Any]:
    import torch.distributed as dist

    from ddp_doctor.patient import isolate as job_side
    from ddp_doctor.patient.pair_rounds import max_rounds

    chooser = random.Random(seed)
    chosen = set(chooser.sample(range(nodes), min(bad, nodes // 4)))  # a quarter at most
    unreachable = set(sorted(chosen)[: len(chosen) // 2])
    job_side.test_pair = modelled_pair(chosen - unreachable, unreachable)
    timeout = timedelta(seconds=120)
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout)
    with ThreadPoolExecutor(64) as pool:  # connects here stall 5 s now and then: overlap them
        clients = list(
            pool.map(
                lambda _: dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timeout),
                range(nodes),
            )
        )
    results: dict[int, Any] = {}

    def node(number: int) -> None:
        placement = {"rank": number, "local_rank": 0, "group_rank": number,
                     "group_world_size": nodes, "world_size": nodes}  # fmt: skip
        results[number] = job_side.isolate(None, clients[number], placement, None, 100.0, 2.0, 1, 0)

    started = time.perf_counter()
    threads = [threading.Thread(target=node, args=(n,), daemon=True) for n in range(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(150)
    seconds = time.perf_counter() - started
    summary = results.get(0) or {}
    return {
        "nodes": nodes,
        "bad": len(chosen),
        "rounds": summary.get("rounds"),
        "bound": max_rounds(nodes),
        "seconds": seconds,
        "exact": set(summary.get("bad") or ()) == chosen and not summary.get("unsettled"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1024)
    parser.add_argument("--bad", type=int, default=5)
    args = parser.parse_args()
    sizes = [n for n in GROWTH if n < args.nodes] + [args.nodes]
    print(f"{'nodes':>6} {'bad':>4} {'rounds':>6} {'bound':>5} {'coord s':>8}  named exactly")
    last: dict[str, Any] = {}
    for nodes in sizes:
        last = run(nodes, args.bad)
        print(
            f"{nodes:>6} {last['bad']:>4} {last['rounds']:>6} {last['bound']:>5} "
            f"{last['seconds']:>8.2f}  {'yes' if last['exact'] else 'no'}"
        )
    print(
        f"isolate: {last['nodes']} nodes, {last['bad']} bad: {last['rounds']} rounds "
        f"(bound {last['bound']}), coordination {last['seconds']:.2f} s, named exactly: "
        f"{'yes' if last['exact'] else 'no'}"
    )


if __name__ == "__main__":
    main()
