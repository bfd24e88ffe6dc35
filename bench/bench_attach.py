"""What attaching costs a running job, and how long attach takes on 8 local ranks.

1. The training loop's speed while attached: a 2-rank gloo DDP job started with plain torchrun
   steps forever, rank 0 logging its step count; its step rate is measured in windows without
   attach and windows during which `ddp-doctor attach` runs back to back, alternating so that
   machine noise hits both alike. Target: within 5% of without.
2. `ddp-doctor attach` on an 8-rank job (default --interval 3, --samples 2): wall time from
   start to report, median of --runs. Target: within 5 s.

Run by hand: `python bench/bench_attach.py [--runs 3] [--window 8]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SCRIPT = """
import os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("gloo")
model = DistributedDataParallel(torch.nn.Linear(64, 64))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs = torch.randn(8, 64)
log = open(sys.argv[1], "a") if dist.get_rank() == 0 else None
step = 0
while True:
    optimizer.zero_grad()
    model(inputs).square().mean().backward()
    optimizer.step()
    step += 1
    if log and step % 20 == 0:
        log.write(f"{time.monotonic():.4f} {step}\\n")
        log.flush()
"""
BIN = Path(sys.executable).parent


@contextlib.contextmanager
def job(ranks: int, folder: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    script, steps = folder / "loop.py", folder / f"steps-{ranks}.log"
    script.write_text(SCRIPT)
    argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), str(script)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*argv, str(steps)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while (not steps.exists() or len(steps.read_text().splitlines()) < 5) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.5)
        yield process, steps
    finally:
        kill_tree(process)


def kill_tree(process: subprocess.Popen) -> None:
    """torchrun starts each rank in a session of its own: killing torchrun's process group
    leaves them running, so every descendant is found first, then all are killed."""
    import psutil

    with contextlib.suppress(psutil.Error):
        ranks = psutil.Process(process.pid).children(recursive=True)
        for rank in ranks:
            with contextlib.suppress(psutil.Error):
                rank.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def attach(pid: int, *options: str) -> tuple[float, dict]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "attach", str(pid), "--format", "json", *options],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return time.monotonic() - started, json.loads(done.stdout)


def rate(steps: Path, start: float, end: float) -> float:
    points = [tuple(map(float, line.split())) for line in steps.read_text().splitlines()]
    inside = [(t, s) for t, s in points if start <= t <= end]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def overhead(runs: int, window: float, folder: Path) -> None:
    plain, attached = [], []
    with job(2, folder) as (process, steps):
        time.sleep(3)
        for _ in range(runs):
            start = time.monotonic()
            time.sleep(window)
            plain.append(rate(steps, start, time.monotonic()))
            start, count = time.monotonic(), 0
            while time.monotonic() - start < window:
                attach(process.pid, "--interval", "1")
                count += 1
            attached.append(rate(steps, start, time.monotonic()))
    without, during = statistics.median(plain), statistics.median(attached)
    print(f"loop speed: {without:.1f} steps/s without attach, {during:.1f} steps/s while attach "
          f"runs back to back ({count} attaches per {window:g} s window): "
          f"{during / without:.1%} of without (target >= 95%)")  # fmt: skip


def eight_ranks(runs: int, folder: Path) -> None:
    times, verdicts = [], []
    with job(8, folder) as (process, _):
        for _ in range(runs):
            seconds, report = attach(process.pid)
            times.append(seconds)
            verdicts.append(sorted(f["code"] for f in report["findings"]) or ["progressing"])
            ranks = len(report["probes"][0]["facts"]["ranks"])
    print(f"attach on {ranks} local ranks (--interval 3, --samples 2): median "
          f"{statistics.median(times):.2f} s of {runs} (target <= 5 s), each "
          f"{', '.join(f'{t:.2f}' for t in times)} s; findings {verdicts}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--window", type=float, default=8.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        overhead(args.runs, args.window, Path(folder))
        eight_ranks(args.runs, Path(folder))


if __name__ == "__main__":
    main()
