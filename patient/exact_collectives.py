"""Exact checks of all-reduce, broadcast and all_gather: every element compared."""

from __future__ import annotations

from typing import Any

ELEMENTS = 1 << 16
HALF_MAX_WORLD = 256  # (rank % 2 + 1) * (i % 4 + 1) summed stays exact in float16 up to here


def check_allreduce(torch: Any, rank: int, world: int, device: Any) -> dict[str, Any]:
    """float32 with values (rank+1)*(i%61+1), exact below 2**24; plus float16 where it fits."""
    results = {
        "float32": _check_sum(
            torch, torch.float32, device, world, lambda r, i: (r + 1) * (i % 61 + 1), rank
        )
    }
    if world <= HALF_MAX_WORLD:
        results["float16"] = _check_sum(
            torch,
            torch.float16,
            device,
            world,
            lambda r, i: (r % 2 + 1) * (i % 4 + 1),
            rank,
        )
    return {"allreduce": results}


def _check_sum(
    torch: Any, dtype: Any, device: Any, world: int, value: Any, rank: int
) -> dict[str, Any]:
    index = torch.arange(ELEMENTS, device=device, dtype=torch.int64)
    mine = value(rank, index).to(dtype)
    expected = sum(value(r, index) for r in range(world)).to(dtype)
    try:
        torch.distributed.all_reduce(mine)
    except RuntimeError as error:
        if "unsupported" in str(error).lower() or "not supported" in str(error).lower():
            return {"supported": False, "error": str(error)[:300]}
        raise
    wrong = mine != expected
    count = int(wrong.sum().item())
    first = int(wrong.nonzero()[0].item()) if count else None
    return {"supported": True, "elements": ELEMENTS, "wrong": count, "first_wrong_index": first}


def check_broadcast_and_all_gather(
    torch: Any, rank: int, world: int, device: Any
) -> dict[str, Any]:
    dist = torch.distributed
    sent = (
        torch.arange(1024, device=device, dtype=torch.float32)
        if rank == 0
        else torch.zeros(1024, device=device)
    )
    dist.broadcast(sent, src=0)
    broadcast_wrong = int(
        (sent != torch.arange(1024, device=device, dtype=torch.float32)).sum().item()
    )
    parts = [torch.empty(4, device=device) for _ in range(world)]
    dist.all_gather(parts, torch.full((4,), float(rank), device=device))
    gather_wrong = sum(int((part != float(r)).sum().item()) for r, part in enumerate(parts))
    return {"broadcast_wrong": broadcast_wrong, "all_gather_wrong": gather_wrong}
