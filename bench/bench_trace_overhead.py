"""What tracing costs: the same DDP training under plain torchrun and under `ddp-doctor trace`.

The script trains a small DDP model for --steps steps, each one DDP backward (gloo all-reduce
of the gradients) plus one all_reduce of the loss through torch.distributed (the wrapped path),
and prints how long its loop took. Runs alternate (plain, traced, plain, ...) so that machine
noise hits both alike; medians of the whole launch and of the loop are printed, with the
overhead per step. Run by hand: `python bench/bench_trace_overhead.py [--runs 5] [--steps 2000]`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """
import sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(64, 64))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(8, 64)
steps = int(sys.argv[1])
started = time.perf_counter()
for _ in range(steps):
    optimizer.zero_grad()
    loss = model(inputs).square().mean()
    loss.backward()
    optimizer.step()
    dist.all_reduce(loss.detach())
print(f"LOOP {time.perf_counter() - started:.6f}", flush=True)
dist.destroy_process_group()
"""
LOOP = re.compile(r"LOOP (\d+\.\d+)")


def run(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{argv[:4]} failed ({done.returncode}): {done.stderr[-800:]}")
    return elapsed, done.stdout


def loop_seconds(text: str) -> float:
    found = [float(x) for x in LOOP.findall(text)]
    if not found:
        sys.exit("the script printed no LOOP line")
    return max(found)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "train.py"
        script.write_text(SCRIPT)
        torchrun = ["torchrun", "--nproc-per-node", "2", str(script), str(args.steps)]
        plain_argv = [sys.executable, "-m", "torch.distributed.run", *torchrun[1:]]
        traced_argv = [sys.executable, "-m", "ddp_doctor", "trace", "--format", "json"]
        traced_argv += ["--python", sys.executable, "--", *torchrun]
        walls: dict[str, list[float]] = {"plain": [], "traced": []}
        loops: dict[str, list[float]] = {"plain": [], "traced": []}
        for _ in range(args.runs):
            wall, out = run(plain_argv)
            walls["plain"].append(wall)
            loops["plain"].append(loop_seconds(out))
            wall, out = run(traced_argv)
            trace = next(p for p in json.loads(out)["probes"] if p["probe"] == "trace")
            walls["traced"].append(wall)
            loops["traced"].append(loop_seconds(trace["facts"]["output_tail"]))
    wall = {k: statistics.median(v) for k, v in walls.items()}
    loop = {k: statistics.median(v) for k, v in loops.items()}
    per_step_us = (loop["traced"] - loop["plain"]) / args.steps * 1e6
    print(f"{args.runs} runs x {args.steps} steps, 2 gloo ranks (medians)")
    print(
        f"  launch wall   plain {wall['plain']:.2f} s   traced {wall['traced']:.2f} s   "
        f"ratio {wall['traced'] / wall['plain']:.2f}"
    )
    print(
        f"  training loop plain {loop['plain']:.3f} s  traced {loop['traced']:.3f} s  "
        f"ratio {loop['traced'] / loop['plain']:.2f}  ({per_step_us:+.0f} us per step)"
    )


if __name__ == "__main__":
    main()
