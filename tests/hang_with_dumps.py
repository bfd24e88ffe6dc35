"""A traced hang that also leaves flight-recorder dumps (for test_collective_verdicts.py): a
DDP model's step (DDP's own collectives come first in the flight recorder's numbering, never
through trace's wrappers), one all_reduce on every rank, then an all_reduce only rank 0 calls,
as under `if rank == 0:`, while rank 1 goes on to a barrier. A thread of the script writes the
rank's dump (pickle) into argv[1] once the main thread has been stuck for a while; then the
doctor names the hang and stops the job. Run under `ddp-doctor trace -- torchrun ...`."""

from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

DUMP_AFTER_S = 1.5


def dump_when_stuck(folder: str, rank: int) -> None:
    time.sleep(DUMP_AFTER_S)
    data = torch._C._distributed_c10d._dump_fr_trace(includeCollectives=True, onlyActive=False)
    temporary = os.path.join(folder, f".fr_trace_{rank}")
    with open(temporary, "wb") as dump:
        dump.write(data)
    os.replace(temporary, os.path.join(folder, f"fr_trace_{rank}"))


def main() -> None:
    folder = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    model(torch.ones(2, 4)).sum().backward()
    total = torch.ones(4)
    dist.all_reduce(total)
    threading.Thread(target=dump_when_stuck, args=(folder, rank), daemon=True).start()
    if rank == 0:
        dist.all_reduce(total)  # rank 1 never calls it
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
