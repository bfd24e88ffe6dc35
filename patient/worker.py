"""The job's body, one process per rank: `torchrun ... -m ddp_doctor_patient --out DIR`.

Stages run in order: init -> identity -> allreduce -> ddp -> bandwidth -> memory. Each writes
its start and its result to the rank's own journal the moment it happens (journal.py), so a
later hang or a dead rank loses nothing already measured. A failed stage ends the rank. In a
multi-node job (`--cluster-dir`) the bandwidth stage also sweeps inside and across nodes, and
every rank then sends its journal to rank 0 through the job's store (cluster_share.py). With
`--isolate-s` (`run --isolate`) an isolate stage comes first: the nodes tested in pairs
(isolate.py); where a pair failed every rank stops after it (and exits 0: the finding is the
report's, and a rank exiting 1 would make torchrun stop the others mid-exchange).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from .journal import Journal
from .watchdog import watch_doctor

Stage = Callable[[], dict[str, Any]]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ddp_doctor_patient")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--init-timeout", type=float, default=10.0)
    parser.add_argument("--sizes", default="1K:16M:4")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--ops", default="all_reduce")
    parser.add_argument("--cluster-dir", type=Path, default=None)
    parser.add_argument("--exchange-timeout", type=float, default=10.0)
    parser.add_argument("--isolate-s", type=float, default=0.0)  # > 0: run --isolate first
    parser.add_argument("--isolate-slow-below", type=float, default=0.5)
    parser.add_argument("--isolate-bytes", type=int, default=512 * 1024)
    return parser.parse_args(argv)


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.journal = Journal(args.out / f"rank{self.rank}.jsonl")
        self.placement = _placement(self.rank, self.world_size, self.local_rank)
        self.journal.note("placement", **self.placement)
        self.torch: Any = None
        self.device: Any = None
        self.backend = args.backend
        self.stopped = False  # the pair tests failed: the whole-world stages would hang

    def run(self) -> int:
        stages: list[tuple[str, Stage]] = [
            ("init", self.init),
            ("identity", self.identity),
            ("allreduce", self.allreduce),
            ("ddp", self.ddp),
            ("bandwidth", self.bandwidth),
            ("memory", self.memory),
        ]
        if self.args.isolate_s > 0:
            stages.insert(0, ("isolate", self.isolate))
        code = 0
        for name, stage in stages:
            if not self._run_stage(name, stage):
                code = 1
                break
            if self.stopped:  # every rank stops alike, on purpose: no rank "fails" (exit 0),
                break  # so torchrun stops none of them while they share the pair tests
        if self.args.cluster_dir is not None:
            self._share_with_cluster()
        if code == 0 and self.torch.distributed.is_initialized():
            self.torch.distributed.destroy_process_group()
        return code

    def _share_with_cluster(self) -> None:
        from .cluster_share import share

        torch = self.torch
        if torch is None:
            try:
                import torch
            except BaseException:  # torch itself is broken: the journal already says so
                return
        share(
            torch,
            self.placement,
            self.journal.path,
            self.args.cluster_dir,
            self.args.exchange_timeout,
        )

    def _run_stage(self, name: str, stage: Stage) -> bool:
        self.journal.start(name)
        started = time.perf_counter()
        try:
            data = stage()
        except Exception as error:
            self.journal.end(
                name,
                ok=False,
                seconds=time.perf_counter() - started,
                error=f"{type(error).__name__}: {error}",
            )
            return False
        data.update(self._memory_now())
        self.journal.end(name, ok=True, seconds=time.perf_counter() - started, data=data)
        return True

    # -- stages ----------------------------------------------------------------------------
    def isolate(self) -> dict[str, Any]:
        import torch

        from .isolate import run_isolation

        self.torch = torch
        backend = _choose_backend(torch, self.args.backend)
        data = run_isolation(
            torch,
            self.placement,
            backend,
            self.args.isolate_s,
            self.args.isolate_bytes,
            self.args.isolate_slow_below,
        )
        self.stopped = bool(data.get("stop"))
        return data

    def init(self) -> dict[str, Any]:
        import torch
        import torch.distributed as dist

        # The rendezvous below mostly waits for the slower ranks: import DDP's modules meanwhile.
        threading.Thread(target=_warm_up_ddp_imports, daemon=True).start()
        self.torch = torch
        self.backend = _choose_backend(torch, self.args.backend)
        if self.backend == "nccl":
            index = self.local_rank % max(1, torch.cuda.device_count())
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
        else:
            self.device = torch.device("cpu")
        dist.init_process_group(self.backend, timeout=timedelta(seconds=self.args.init_timeout))
        return {
            "backend": self.backend,
            "init_method": "env://",
            "device": str(self.device),
            "master": f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
        }

    def identity(self) -> dict[str, Any]:
        from .identity import describe_rank, gather_identities

        me = describe_rank(self.torch, self.rank, self.world_size, self.local_rank, self.device)
        data: dict[str, Any] = {"identity": me}
        if self.local_rank == 0:  # each node's torch, for its own report
            from .identity import peer_access
            from .torch_describe import describe_torch

            data["torch"] = describe_torch()
            if self.device.type == "cuda":
                data["peer_access"] = peer_access(self.torch)
        data["identities"] = gather_identities(
            self.torch, me, self.rank, self.world_size, self.args.init_timeout
        )
        return data

    def allreduce(self) -> dict[str, Any]:
        from .exact_collectives import check_allreduce, check_broadcast_and_all_gather

        data = check_allreduce(self.torch, self.rank, self.world_size, self.device)
        data.update(
            check_broadcast_and_all_gather(self.torch, self.rank, self.world_size, self.device)
        )
        return data

    def ddp(self) -> dict[str, Any]:
        from .ddp_step import run_ddp_steps

        return run_ddp_steps(self.torch, self.rank, self.world_size, self.device)

    def bandwidth(self) -> dict[str, Any]:
        from .bandwidth import parse_ops, parse_sizes, sweep

        sizes = parse_sizes(self.args.sizes)
        rows: list[dict[str, Any]] = []
        errors: dict[str, str] = {}
        for op in parse_ops(self.args.ops):
            try:
                rows += sweep(self.torch, self.device, sizes, self.args.iters, op)
            except (RuntimeError, ValueError, NotImplementedError) as error:
                # A collective the backend lacks fails on every rank alike: go on to the next.
                errors[op] = f"{type(error).__name__}: {str(error)[:300]}"
        data: dict[str, Any] = {"rows": rows} if self.rank == 0 else {"sizes": len(rows)}
        if errors:
            data["errors"] = errors
        if self.args.cluster_dir is not None:
            from .node_bandwidth import sweep_nodes

            data.update(sweep_nodes(self.torch, self.device, sizes, self.args.iters, self.rank))
        return data

    def memory(self) -> dict[str, Any]:
        if self.device.type != "cuda":
            return {"skipped": "no GPU in this rank"}
        from .gpu_memory import processes_per_gpu

        self.torch.distributed.barrier()  # every rank still holds its memory while NVML looks
        data = {"gpu_processes": processes_per_gpu()} if self.rank == 0 else {}
        self.torch.distributed.barrier()
        return data

    def _memory_now(self) -> dict[str, Any]:
        if self.device is None or self.device.type != "cuda":
            return {}
        cuda = self.torch.cuda
        return {
            "peak_allocated_bytes": cuda.max_memory_allocated(self.device),
            "peak_reserved_bytes": cuda.max_memory_reserved(self.device),
        }


def _placement(rank: int, world_size: int, local_rank: int) -> dict[str, Any]:
    """Where torchrun put this rank: its node (group rank) and that node's host."""
    return {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        "group_rank": int(os.environ.get("GROUP_RANK", "0")),
        "group_world_size": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
        "host": socket.gethostname(),
    }


def _choose_backend(torch: Any, wanted: str) -> str:
    if wanted != "auto":
        return wanted
    usable_gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    return "nccl" if usable_gpu and torch.distributed.is_nccl_available() else "gloo"


def _warm_up_ddp_imports() -> None:
    """The first DDP wrap imports ~800 modules (torch._dynamo, sympy): start that early, in the
    background, while the rank mostly waits on the network."""
    with contextlib.suppress(Exception):
        import torch._dynamo  # noqa: F401


def main(argv: Sequence[str] | None = None) -> int:
    watch_doctor()
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return Worker(args).run()
