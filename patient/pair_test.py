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
MAX_TRANSFERS = 1000  # per direction
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
    torch: Any, group: Any, pair_rank: int, nbytes: int, window_s: float, device: Any
) -> float | None:
    """Bandwidth one way at a time, each side's own direction (data sent until the receiver's
    ack), GB/s: the best of as many transfers as fit in `window_s` (at least two, the first a
    warm-up), so a fast link is timed over hundreds and a scheduler's pause costs nothing."""
    data = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
    ack = torch.zeros(1, dtype=torch.float32, device=device)
    mine: float | None = None
    # NCCL's wait() only orders streams: the clock needs the device to have finished
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for sender in (0, 1):
        if pair_rank == sender:
            mine = _send_timed(group, data, ack, 1 - sender, window_s, sync)
        else:
            _receive_until_last(group, data, ack, sender)
    return mine


def _send_timed(
    group: Any, data: Any, ack: Any, peer: int, window_s: float, sync: Callable[[], None]
) -> float:
    """data[0] says whether another transfer follows (1) or this is the last (0)."""
    times: list[float] = []
    began = time.perf_counter()
    while True:
        spent = time.perf_counter() - began
        last = len(times) >= MAX_TRANSFERS - 1 or (
            len(times) >= 1 and spent + min(times) * 2 > window_s
        )
        data[0] = 0.0 if last else 1.0
        started = time.perf_counter()
        group.send([data], peer, TAG_DATA).wait()
        group.recv([ack], peer, TAG_ACK).wait()
        sync()
        times.append(time.perf_counter() - started)
        if last:
            break
    return data.numel() * 4 / max(min(times[1:]), 1e-9) / 1e9


def _receive_until_last(group: Any, data: Any, ack: Any, peer: int) -> None:
    for _ in range(MAX_TRANSFERS):
        group.recv([data], peer, TAG_DATA).wait()
        group.send([ack], peer, TAG_ACK).wait()
        if float(data[0]) == 0.0:
            return


def test_pair(
    torch: Any,
    store: Any,
    prefix: str,
    nodes: tuple[int, int],
    node: int,
    device: Any,
    connect_s: float,
    nbytes: int,
    window_s: float,
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
            lambda: send_gbps(torch, group, pair_rank, nbytes, window_s, device),
            _bandwidth_bound(nbytes, window_s, connect_s),
            f"send/recv with node {partner}",
        )
    except Exception as error:
        row["error"] = f"{type(error).__name__}: {error}"[:ERROR_CHARS]
    return row


def _bandwidth_bound(nbytes: int, window_s: float, connect_s: float) -> float:
    """Room for both directions' windows, and their two transfers at 10 Mbit/s."""
    return connect_s + 2 * (window_s + 3 * nbytes / 1.25e6)
