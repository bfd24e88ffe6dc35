"""Start-up time of the commands that never import torch, against the floor of any click tool.

Run by hand, not by CI:

    python bench/bench_startup.py              # 15 interleaved rounds
    python bench/bench_startup.py --rounds 31

The floor is `python -c "import click"` in the same interpreter. Each command runs as a user
runs it, through the installed console script started by this interpreter (or `-m ddp_doctor`
where there is none), on a small training file and a small log made in a temporary folder.
Every round runs every case once, in rotating order, so drifting machine load hits all alike;
the medians are compared. Bytecode caching is on for every case (PYTHONDONTWRITEBYTECODE is
dropped), as after any pip install: without it each start recompiles the doctor's ~40 modules
(about 25 ms) while click's and the standard library's caches are already there. Targets (issue: one install for every environment): --help at most
1.3x the floor; check, logs, explain and rules at most 2x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"--help": 1.3, "check": 2.0, "logs": 2.0, "explain": 2.0, "rules": 2.0}
SMALL_SCRIPT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("nccl")
    model = DDP(torch.nn.Linear(4, 4).cuda())
    for epoch in range(3):
        for batch in range(10):
            model(torch.randn(2, 4).cuda()).sum().backward()


if __name__ == "__main__":
    main()
"""
SMALL_LOG = """\
[rank1]: Traceback (most recent call last):
[rank1]: RuntimeError: CUDA error: out of memory
E1130 12:00:00 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1)
"""


def doctor_argv() -> list[str]:
    script = Path(sys.executable).with_name("ddp-doctor")
    if script.is_file() and script.read_bytes()[:2] == b"#!":
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "ddp_doctor"]


def cases(folder: Path) -> dict[str, list[str]]:
    script, log = folder / "train.py", folder / "run.log"
    script.write_text(SMALL_SCRIPT)
    log.write_text(SMALL_LOG)
    doctor = doctor_argv()
    return {
        "floor": [sys.executable, "-c", "import click"],
        "--help": [*doctor, "--help"],
        "check": [*doctor, "check", str(script)],
        "logs": [*doctor, "logs", str(log)],
        "explain": [*doctor, "explain", "DDP113"],
        "rules": [*doctor, "rules"],
    }


ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENVIRONMENT, check=False
    )
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ddp-doctor-bench-"))
    try:
        commands = cases(folder)
        names = list(commands)
        times: dict[str, list[float]] = {name: [] for name in names}
        for name in names:  # warm the page cache once
            timed(commands[name])
        for round_index in range(args.rounds):
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(timed(commands[name]))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    floor = statistics.median(times["floor"])
    print(f"floor (python -c 'import click'): {floor * 1000:.1f} ms, {args.rounds} rounds")
    print(f"{'command':10} {'median ms':>10} {'ratio':>7} {'target':>7}")
    failed = False
    for name, target in TARGETS.items():
        median = statistics.median(times[name])
        ratio = median / floor
        failed |= ratio > target
        mark = "" if ratio <= target else "  over"
        print(f"{name:10} {median * 1000:10.1f} {ratio:7.2f} {target:7.1f}{mark}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
