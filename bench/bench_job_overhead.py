"""Wall time of `ddp-doctor run` against a bare torchrun launch doing the minimum.

The bare launch: the same number of ranks and backend, a script that imports torch, inits the
process group and all-reduces once. Runs alternate (doctor, bare, doctor, ...) so that machine
noise hits both alike; medians and their ratio are printed. Run by hand: `python
bench/bench_job_overhead.py [--runs 7] [--nproc 2]`. Target: ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
"""


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.exit(f"{argv[:3]} failed ({result.returncode}): {result.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "bare.py"
        script.write_text(BARE_SCRIPT)
        bare = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(args.nproc),
            str(script),
        ]
        doctor = ["ddp-doctor", "run", "--format", "json", "--nproc", str(args.nproc)]
        timed(bare), timed(doctor)  # warm the page cache for both
        doctor_times, bare_times = [], []
        for _ in range(args.runs):
            doctor_times.append(timed(doctor))
            bare_times.append(timed(bare))
    d, b = statistics.median(doctor_times), statistics.median(bare_times)
    print(f"runs: {args.runs} each, interleaved, {args.nproc} ranks, gloo")
    print(
        f"ddp-doctor run : median {d:.2f} s  (min {min(doctor_times):.2f}, max {max(doctor_times):.2f})"
    )
    print(
        f"bare torchrun  : median {b:.2f} s  (min {min(bare_times):.2f}, max {max(bare_times):.2f})"
    )
    print(f"ratio          : {d / b:.2f}x  (target <= 1.5x)")


if __name__ == "__main__":
    main()
