"""A real gloo job that leaves flight-recorder dumps with known divergences (for
test_flightrec_jobs.py). Run once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
TORCH_FR_BUFFER_SIZE set; argv[1] is the folder for the dumps.

- default group: both ranks all_reduce and broadcast; then rank 0 alone enters an all_reduce
  of 5x2 (rank 1 "skipped" it, as under `if rank == 0:`);
- group "guard": rank 0 all_reduces while rank 1 is already in the next barrier;
- group "dtype": both all_reduce 4 elements, rank 0 as float32, rank 1 as int32.
Every rank dumps (pickle and JSON) while its last collectives are pending, then exits at once.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    folder = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    guard = dist.new_group([0, 1], group_desc="guard")
    dtype = dist.new_group([0, 1], group_desc="dtype")
    dist.all_reduce(torch.ones(4, 3))
    dist.broadcast(torch.zeros(7), 0)
    values = torch.ones(4) if rank == 0 else torch.ones(4, dtype=torch.int32)
    dist.all_reduce(values, group=dtype)
    if rank == 0:
        dist.all_reduce(torch.ones(5, 2), group=guard, async_op=True)
        dist.all_reduce(torch.ones(5, 2), async_op=True)
    else:
        dist.barrier(group=guard, async_op=True)
    c10d = torch._C._distributed_c10d
    _wait_until_retired(c10d, pending=2 if rank == 0 else 1)
    with open(os.path.join(folder, f"fr_trace_{rank}"), "wb") as dump:
        dump.write(c10d._dump_fr_trace(includeCollectives=True, onlyActive=False))
    with open(os.path.join(folder, f"fr_json_{rank}.json"), "wb") as dump:
        dump.write(c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False))
    # No rank leaves before both have dumped: on a loaded machine a peer that exited first
    # closed its sockets under the other's pending collectives, which then ended in an error
    # before that rank's dump was written (and the dump no longer showed them waiting).
    store = dist.distributed_c10d._get_default_store()
    everyone = range(dist.get_world_size())
    store.set(f"dumped/{rank}", "1")
    store.wait([f"dumped/{other}" for other in everyone])
    store.set(f"leaving/{rank}", "1")
    if rank == 0:  # the store's host leaves last
        store.wait([f"leaving/{other}" for other in everyone])
    sys.stdout.flush()
    os._exit(0)  # the pending collectives would otherwise wait for their timeout


def _wait_until_retired(c10d: object, pending: int, bound_s: float = 30.0) -> None:
    """Gloo retires a finished entry from its own thread, after the call has returned: on a
    loaded machine a dump taken at once could show the last synchronous collective still
    pending. Every entry but the `pending` ones the rank left waiting is retired first."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        entries = json.loads(c10d._dump_fr_trace_json(True, False)).get("entries", [])
        finished = [e.get("retired") or e.get("state") == "completed" for e in entries]
        if len(finished) > pending and all(finished[:-pending]):
            return
        time.sleep(0.05)


if __name__ == "__main__":
    main()
