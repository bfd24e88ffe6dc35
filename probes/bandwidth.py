"""The all-reduce size sweep, timed and reported with nccl-tests' formulas.

algbw = bytes / time; busbw = algbw * 2(n-1)/n for all-reduce; GB = 1e9 bytes. Each size is
timed as three back-to-back loops of `iters` ops; the median loop's mean is the rank's time,
and the slowest rank's time is the collective's (a MAX all-reduce), as in nccl-tests.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
LOOPS = 3
ELEMENT_BYTES = 4  # float32


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


def bus_factor(world_size: int) -> float:
    return 2 * (world_size - 1) / world_size


def sweep(
    torch: Any, device: Any, sizes: list[int], iters: int, world_size: int, group: Any = None
) -> list[dict[str, Any]]:
    """`group`: a sub-group (its members only call this; `world_size` is its size)."""
    rows = []
    for size in sizes:
        count = size // ELEMENT_BYTES
        seconds = _time_allreduce(torch, device, count, iters, group)
        algbw = (count * ELEMENT_BYTES) / seconds / 1e9
        rows.append(
            {
                "size_bytes": count * ELEMENT_BYTES,
                "count": count,
                "dtype": "float",
                "time_us": round(seconds * 1e6, 2),
                "algbw_gbps": round(algbw, 4),
                "busbw_gbps": round(algbw * bus_factor(world_size), 4),
            }
        )
    return rows


def _time_allreduce(torch: Any, device: Any, count: int, iters: int, group: Any = None) -> float:
    dist = torch.distributed
    tensor = torch.ones(count, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):  # warm-up: connections, buffers, NCCL channels
        dist.all_reduce(tensor, group=group)
    sync()
    loop_means = []
    for _ in range(LOOPS):
        dist.barrier(group=group)
        started = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor, group=group)
        sync()
        loop_means.append((time.perf_counter() - started) / iters)
    slowest = torch.tensor([statistics.median(loop_means)], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return float(slowest.item())
