"""What attaching costs a running job, and how long attach takes on 8 local ranks.

1. The training loop's speed while attached: a 2-rank gloo DDP job started with plain torchrun
   steps forever, rank 0 logging its step count; its step rate is measured in windows without
   attach and windows during which `ddp-doctor attach` runs back to back, alternating so that
   machine noise hits both alike. Target: within 5% of without.
2. `ddp-doctor attach` on an 8-rank job (default --interval 3, --samples 2): wall time from
   start to report, median of --runs. Target: within 5 s.

Run by hand, when the machine is least loaded (`uptime`): `python bench/bench_attach.py [--runs 9]
[--window 5] [--pin]`. Each figure is printed with the load average beside it; the last line holds
both. On a machine with fewer cores than the job and the doctor need (2 cores, a 2-rank job
spinning on both), attach's own CPU time is taken from the job: `--pin` puts the job's ranks on
CPU 0 and attach (and its py-spy) on CPU 1, so the figure is what attach costs the ranks
themselves (their pauses while py-spy reads them), as on a node with cores to spare.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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
    """The job, on JOB_CPUS where --pin gave some (torchrun's ranks inherit the affinity)."""
    script, steps = folder / "loop.py", folder / f"steps-{ranks}.log"
    script.write_text(SCRIPT)
    argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(ranks), str(script)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [*argv, str(steps)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=_pinned(JOB_CPUS),
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


JOB_CPUS: set[int] = set()  # --pin: the job's CPUs; attach runs on the others
ATTACH_CPUS: set[int] = set()


def _pinned(cpus: set[int]) -> Callable[[], None] | None:
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


CPU_USED: list[tuple[float, float]] = []  # (CPU s of the doctor and its py-spy, wall s) each


def attach(pid: int, *options: str) -> tuple[float, dict]:
    started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "attach", str(pid), "--format", "json", *options],
        capture_output=True, text=True, timeout=120, preexec_fn=_pinned(ATTACH_CPUS),
    )  # fmt: skip
    after, seconds = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU_USED.append((cpu, seconds))
    return seconds, json.loads(done.stdout)


def cpu_share() -> str:
    """What attach itself costs, whatever the load: its CPU time (the doctor and the py-spy
    it runs) per attach, and as a share of one core while it runs."""
    cpu = statistics.median(c for c, _ in CPU_USED)
    share = statistics.median(c / w for c, w in CPU_USED if w)
    return f"attach's own CPU {cpu:.2f} s per attach, {share:.0%} of one core while it runs"


def rate(steps: Path, start: float, end: float) -> float:
    points = [tuple(map(float, line.split())) for line in steps.read_text().splitlines()]
    inside = [(t, s) for t, s in points if start <= t <= end]
    if len(inside) < 2:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def load() -> str:
    """The machine's 1-minute load average and its cores, printed beside every figure."""
    return f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def overhead(runs: int, window: float, folder: Path) -> tuple[float, str, str]:
    """Alternating windows without and with attach running back to back; the median rate of
    each kind, and their ratio."""
    plain, attached, counts = [], [], []
    with job(2, folder) as (process, steps):
        time.sleep(3)
        for number in range(runs):
            start, before = time.monotonic(), load()
            time.sleep(window)
            plain.append(rate(steps, start, time.monotonic()))
            start, count = time.monotonic(), 0
            while time.monotonic() - start < window:
                attach(process.pid, "--interval", "1")
                count += 1
            attached.append(rate(steps, start, time.monotonic()))
            counts.append(count)
            print(f"  round {number + 1}: {plain[-1]:.1f} steps/s without, {attached[-1]:.1f} "
                  f"with {count} attaches ({before}, then {load()})")  # fmt: skip
    without, during = statistics.median(plain), statistics.median(attached)
    # each round's two windows are neighbours in time: their ratio cancels the load's drift
    share = statistics.median(a / p for a, p in zip(attached, plain, strict=True) if p)
    print(f"loop speed: median {without:.1f} steps/s without attach, {during:.1f} steps/s while "
          f"attach runs back to back ({statistics.median(counts):g} attaches per {window:g} s "
          f"window), {runs} rounds: median of the rounds' ratios {share:.1%} of without "
          f"(target >= 95%); {cpu_share()}")  # fmt: skip
    return share, load(), cpu_share()


def eight_ranks(runs: int, folder: Path) -> tuple[float, str]:
    times, verdicts, ranks = [], [], 0
    CPU_USED.clear()
    with job(8, folder) as (process, _):
        for _ in range(runs):
            seconds, report = attach(process.pid)
            times.append(seconds)
            verdicts.append(sorted(f["code"] for f in report["findings"]) or ["progressing"])
            ranks = len(report["probes"][0]["facts"]["ranks"])
        busy = load()
    median = statistics.median(times)
    print(f"attach on {ranks} local ranks (--interval 3, --samples 2): median "
          f"{median:.2f} s of {runs} (target <= 5 s), each "
          f"{', '.join(f'{t:.2f}' for t in times)} s; findings {verdicts} ({busy}); "
          f"{cpu_share()}")  # fmt: skip
    return median, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--pin", action="store_true", help="job on CPU 0, attach on CPU 1")
    args = parser.parse_args()
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            parser.error("--pin needs two CPUs")
        first, second, *_ = sorted(os.sched_getaffinity(0))
        JOB_CPUS.add(first)
        ATTACH_CPUS.add(second)
    pinning = f", job on CPU {min(JOB_CPUS)}, attach on CPU {min(ATTACH_CPUS)}" if args.pin else ""
    print(
        f"bench_attach: {args.runs} rounds, {args.window:g} s windows, {load()} at start{pinning}"
    )
    with tempfile.TemporaryDirectory() as folder:
        share, loaded, cost = overhead(args.runs, args.window, Path(folder))
        median, busy = eight_ranks(5, Path(folder))
    print(f"bench_attach result{pinning}: loop at {share:.1%} of its speed while attached "
          f"(target >= 95%, {loaded}); attach on 8 local ranks {median:.2f} s median (target <= 5 s, "
          f"{busy}); on 2 ranks {cost}")  # fmt: skip


if __name__ == "__main__":
    main()
