"""The collectives' size sweep, timed and reported with nccl-tests' formulas.

algbw = S / time, GB = 1e9 bytes, with S as nccl-tests counts it: the buffer for all_reduce
and broadcast, the whole gathered (or scattered) array for all_gather and reduce_scatter, one
rank's whole send buffer for all_to_all. busbw = algbw x the collective's factor
(nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n, all_gather, reduce_scatter and
all_to_all (n-1)/n, broadcast 1. Each size is timed as three back-to-back loops of `iters` ops;
the median loop's mean is the rank's time, and the slowest rank's time is the collective's
(a MAX all-reduce), as in nccl-tests.

`sweep` takes a process group so that a sub-group (one node, one rank per node) can be
measured with the same code.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
LOOPS = 3
ELEMENT_BYTES = 4  # float32
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
DEFAULT_OPS = ("all_reduce",)


class SizesError(ValueError):
    pass


def parse_size(text: str) -> int:
    text = text.strip().upper()
    unit = text[-1] if text and text[-1] in UNITS else ""
    number = text[: len(text) - len(unit)]
    if not number.isdigit():
        raise SizesError(f"{text!r} is not a size like 1024, 64K, 16M or 1G")
    return int(number) * UNITS[unit]


def parse_sizes(spec: str) -> list[int]:
    """'MIN:MAX:FACTOR' as nccl-tests' -b -e -f, e.g. '1K:16M:4'."""
    parts = spec.split(":")
    if len(parts) != 3:
        raise SizesError(f"--sizes {spec!r} must be MIN:MAX:FACTOR, e.g. 1K:16M:4")
    low, high = parse_size(parts[0]), parse_size(parts[1])
    if not parts[2].strip().isdigit() or int(parts[2]) < 2:
        raise SizesError(f"--sizes factor {parts[2]!r} must be a whole number of at least 2")
    if low < ELEMENT_BYTES or high < low:
        raise SizesError(f"--sizes {spec!r}: need {ELEMENT_BYTES} <= MIN <= MAX")
    sizes, size = [], low
    while size <= high:
        sizes.append(size)
        size *= int(parts[2])
    return sizes


def parse_ops(spec: str) -> tuple[str, ...]:
    """'all_reduce,all_gather' -> ('all_reduce', 'all_gather'); '-' may stand for '_'."""
    ops = tuple(dict.fromkeys(p.strip().replace("-", "_") for p in spec.split(",") if p.strip()))
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise SizesError(f"--ops {spec!r}: choose from {','.join(OPS)}")
    return ops


def bus_factor(world_size: int, op: str = "all_reduce") -> float:
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def sweep(
    torch: Any,
    device: Any,
    sizes: list[int],
    iters: int,
    op: str = "all_reduce",
    group: Any = None,
) -> list[dict[str, Any]]:
    n = torch.distributed.get_world_size(group)
    rows = []
    for size in sizes:
        # Collectives that split the buffer between ranks round it down to whole shares, as
        # nccl-tests does.
        count = size // ELEMENT_BYTES
        if op not in ("all_reduce", "broadcast"):
            count = max(n, count // n * n)
        seconds = _time(torch, device, _collective(torch, device, op, count, group), iters, group)
        algbw = (count * ELEMENT_BYTES) / seconds / 1e9
        rows.append(
            {
                "op": op,
                "size_bytes": count * ELEMENT_BYTES,
                "count": count,
                "dtype": "float",
                "time_us": round(seconds * 1e6, 2),
                "algbw_gbps": round(algbw, 4),
                "busbw_gbps": round(algbw * bus_factor(n, op), 4),
            }
        )
    return rows


def _collective(torch: Any, device: Any, op: str, count: int, group: Any) -> Callable[[], Any]:
    """One call of the collective on buffers made once; `count` elements as S counts them."""
    dist = torch.distributed
    n = dist.get_world_size(group)
    whole = torch.ones(count, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(whole, group=group)
    if op == "broadcast":
        root = dist.get_global_rank(group, 0) if group is not None else 0
        return lambda: dist.broadcast(whole, root, group=group)
    share = torch.ones(count // n, dtype=torch.float32, device=device)
    if op == "all_gather":
        # all_gather_single is all_gather_into_tensor's name from torch 2.13 on.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(whole, share, group=group)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(share, whole, group=group)
    if op == "all_to_all":
        received = torch.empty_like(whole)
        return lambda: dist.all_to_all_single(received, whole, group=group)
    raise ValueError(f"unknown collective {op!r}")


def _time(torch: Any, device: Any, call: Callable[[], Any], iters: int, group: Any) -> float:
    dist = torch.distributed
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):  # warm-up: connections, buffers, NCCL channels
        call()
    sync()
    loop_means = []
    for _ in range(LOOPS):
        dist.barrier(group=group)
        started = time.perf_counter()
        for _ in range(iters):
            call()
        sync()
        loop_means.append((time.perf_counter() - started) / iters)
    slowest = torch.tensor([statistics.median(loop_means)], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return float(slowest.item())
