"""One pair of `run --isolate`: the first rank of each of two nodes, in a two-rank group of
their own, tested for connectivity, an exact all-reduce and point-to-point bandwidth both ways.

The group is the one `new_group` would build (a ProcessGroupGloo, or ProcessGroupNCCL with
device tensors, on a PrefixStore of the job's own store), made directly so that it needs no
whole-world group first: with gloo that group connects every rank to every other at once, so
a node that cannot connect would stop the pair tests before they start (and hang the rest).
Every step runs under a deadline of its own, in a daemon thread where the call itself could
block past its timeout (gloo retries a connection ~5x its timeout): a node that cannot
connect becomes an outcome, never a hang. Standard library and torch only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

TAG_DATA, TAG_ACK = 17, 18
ERROR_CHARS = 300


class PairTimeout(RuntimeError):
    pass


def bounded(work: Callable[[], Any], seconds: float, what: str) -> Any:
    """work() in a daemon thread, waited for at most `seconds` (then PairTimeout)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as error:  # the caller turns it into an outcome
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True, name=f"ddp-doctor {what}")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise PairTimeout(f"{what}: no answer in {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def make_group(torch: Any, store: Any, prefix: str, pair_rank: int, device: Any, timeout_s: float):
    """The pair's two-rank group on the job's store (as new_group's would be)."""
    dist = torch.distributed
    scoped = dist.PrefixStore(prefix, store)
    if device.type == "cuda":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timedelta(seconds=timeout_s)
        return dist.ProcessGroupNCCL(scoped, pair_rank, 2, options)
    return dist.ProcessGroupGloo(scoped, pair_rank, 2, timedelta(seconds=timeout_s))


def exact_allreduce(torch: Any, group: Any, node: int, partner: int, device: Any) -> bool:
    """Both nodes add their integers; the sum must be exact."""
    values = torch.arange(4096, dtype=torch.int64, device=device)
    mine = values + node
    group.allreduce([mine]).wait()
    return bool(torch.equal(mine, 2 * values + node + partner))


def send_gbps(
    torch: Any, group: Any, pair_rank: int, nbytes: int, iters: int, device: Any
) -> float | None:
    """Bandwidth one way at a time (sender's view: data sent until the receiver's ack), the
    best of `iters` after a warm-up; each side returns its own direction's, GB/s."""
    data = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)
    ack = torch.zeros(1, dtype=torch.float32, device=device)
    mine: float | None = None
    for sender in (0, 1):
        best = None
        for _ in range(iters + 1):  # the first is a warm-up
            if pair_rank == sender:
                started = time.perf_counter()
                group.send([data], 1 - sender, TAG_DATA).wait()
                group.recv([ack], 1 - sender, TAG_ACK).wait()
                took = time.perf_counter() - started
                best = took if best is None or took < best else best
            else:
                group.recv([data], sender, TAG_DATA).wait()
                group.send([ack], sender, TAG_ACK).wait()
        if pair_rank == sender and best:
            mine = data.numel() * 4 / best / 1e9
    return mine


def test_pair(
    torch: Any,
    store: Any,
    prefix: str,
    nodes: tuple[int, int],
    node: int,
    device: Any,
    connect_s: float,
    nbytes: int,
    iters: int,
) -> dict[str, Any]:
    """This node's view of its pair: connected, exact, its own direction's GB/s, an error."""
    pair_rank = nodes.index(node)
    partner = nodes[1 - pair_rank]
    row: dict[str, Any] = {"node": node, "connected": False}
    try:
        group = bounded(
            lambda: make_group(torch, store, prefix, pair_rank, device, connect_s),
            connect_s + 2,
            f"forming the group with node {partner}",
        )
        row["exact"] = bounded(
            lambda: exact_allreduce(torch, group, node, partner, device),
            connect_s,
            f"all-reduce with node {partner}",
        )
        row["connected"] = True
        row["gbps"] = bounded(
            lambda: send_gbps(torch, group, pair_rank, nbytes, iters, device),
            _bandwidth_bound(nbytes, iters, connect_s),
            f"send/recv with node {partner}",
        )
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"[:ERROR_CHARS]
    return row


def _bandwidth_bound(nbytes: int, iters: int, connect_s: float) -> float:
    """Room for both directions at 10 Mbit/s, half the slowest link a test here measures."""
    return connect_s + 2 * (iters + 1) * nbytes / 1.25e6
