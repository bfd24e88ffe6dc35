"""Wall time of a two-node `ddp-doctor run` against a bare two-node torchrun doing the minimum,
both across two network namespaces on this machine (tests/netns.py; needs root).

The bare launch: static rendezvous, the same ranks per node, a script that imports torch,
inits a gloo group and all-reduces once. Runs alternate (doctor, bare, ...) so machine noise
hits both alike; the time of a run is its slower node's. Run by hand:
`python bench/bench_multinode.py [--runs 5] [--nproc 2]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from multinode_runs import node_environment  # noqa: E402
from netns import simulated_hosts, why_unavailable  # noqa: E402

BARE_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
"""
PORT = "29531"


def timed_pair(hosts: object, argv_of: object) -> float:
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            hosts.command(node, argv_of(node)),  # type: ignore[attr-defined, operator]
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=node_environment(),
        )
        for node in (0, 1)
    ]
    for process in processes:
        _, err = process.communicate(timeout=300)
        if process.returncode not in (0, 1):
            sys.exit(f"a node failed ({process.returncode}): {err[-500:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    if why_unavailable():
        sys.exit(f"cannot make namespaces: {why_unavailable()}")
    nodes = ["--nnodes", "2", "--master-addr", "node0", "--master-port", PORT]
    per_node = ["--nproc-per-node", str(args.nproc)]
    with tempfile.TemporaryDirectory() as folder, simulated_hosts(2) as hosts:
        script = Path(folder) / "bare.py"
        script.write_text(BARE_SCRIPT)

        def bare(node: int) -> list[str]:
            run = [sys.executable, "-m", "torch.distributed.run", *nodes, *per_node]
            return [*run, "--node-rank", str(node), str(script)]

        def doctor(node: int) -> list[str]:
            run = [sys.executable, "-m", "ddp_doctor", "run", "--format", "json", *nodes]
            return [*run, "--node-rank", str(node), "--nproc", str(args.nproc)]

        timed_pair(hosts, bare), timed_pair(hosts, doctor)  # warm the page cache for both
        doctor_times, bare_times = [], []
        for _ in range(args.runs):
            doctor_times.append(timed_pair(hosts, doctor))
            bare_times.append(timed_pair(hosts, bare))
    d, b = statistics.median(doctor_times), statistics.median(bare_times)
    print(f"runs: {args.runs} each, interleaved, 2 nodes x {args.nproc} ranks, gloo, namespaces")
    print(
        f"ddp-doctor run : median {d:.2f} s  (min {min(doctor_times):.2f}, max {max(doctor_times):.2f})"
    )
    print(
        f"bare torchrun  : median {b:.2f} s  (min {min(bare_times):.2f}, max {max(bare_times):.2f})"
    )
    print(f"ratio          : {d / b:.2f}x")


if __name__ == "__main__":
    main()
