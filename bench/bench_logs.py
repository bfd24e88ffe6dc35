"""Benchmark `ddp-doctor logs` against `grep -E` with the same texts on a large log.

Run by hand (not by CI), on a quiet machine:
    python bench/bench_logs.py [--size-mb 1024,256] [--rounds 3]

For each size it writes a log of mostly realistic noise (training steps, NCCL INFO, progress
bars) with a match every ~1000 lines and a torchrun failure summary at the end, into a
temporary folder (removed afterwards). Then it times, in interleaved rounds, `grep -E -n -a`
with the pattern table's anchors as one alternation (what a grep user would type for the same
texts) and `ddp-doctor logs FILE --format json`, each in a fresh child whose peak RSS is read
with getrusage. It prints the medians, the time ratio against its target (3x on 1 GiB and on
256 MiB, issue 21) and both peak RSS values; a small log shows memory is flat; and how many lines reached
the pattern table at all (every other line costs only the prefilter's few passes).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ddp_doctor.logscan.pattern import grep_alternation
from ddp_doctor.logscan.patterns import all_anchors
from ddp_doctor.logscan.scanner import PREFILTER, READ_BYTES, LogScanner

NOISE = (
    "[rank{r}]:[I1121 10:{m:02d}:{s:02d}.123456 {pid} train.py:{n}] epoch {e} step {st} "
    "loss={l:.4f} lr={lr:.2e} grad_norm={g:.3f} throughput={t:.1f} samples/s",
    "node-{r}:{pid}:{pid2} [{d}] NCCL INFO Channel {c:02d}/0 : {r} -> {d} via P2P/CUMEM/read",
    "Epoch {e}:  {p}%|#####     | {st}/20000 [01:{m:02d}<02:{s:02d}, 3.21it/s, loss={l:.3f}]",
    "{r}: INFO:root:Validation accuracy {l:.4f} after {st} steps; time: {t:.2f}s; GPU memory "
    "allocated 12.3 GiB, reserved 14.1 GiB",
    "node-{r}:{pid}:{pid2} [{d}] NCCL INFO comm 0x7f5d10e6e7d0 rank {r} nRanks 8 nNodes 1 "
    "localRanks 8 localRank {d} MNNVL 0 - Init COMPLETE",
    "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:{n}: UserWarning: "
    "This DataLoader will create {d} worker processes in total.",
    "[2025-03-01 02:{m:02d}:{s:02d},{n:03d}][trainer][INFO] - saved checkpoint step_{st}.pt "
    "({t:.1f} MB) to /ckpt/run-{pid}",
)
MATCHES = (
    # lines the fact extraction reads (logfacts.py): the bench measures it on
    "node-{r}:{pid}:{pid} [{d}] NCCL INFO Bootstrap : Using eth0:10.0.{r}.{d}<0>",
    "node-{r}:{pid}:{pid} [{d}] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
    "node-{r}:{pid}:{pid} [{d}] NCCL INFO NCCL version 2.21.5+cuda12.4",
    # per-rank facts (rankfacts.py): launch values, world size and versions each rank prints
    "[rank{r}]: WORLD_SIZE=8 RANK={r} MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 torch version: 2.5.1",
    "[rank{r}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum={st}, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.",
    "node-{r}:{pid}:{pid2} [{d}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
    "from peer 10.3.0.9<41202> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
    "[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU {d} "
    "has a total capacity of 79.10 GiB of which 1.02 GiB is free.",
)
SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-03-01_02:14:51
  host      : cn-042
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 118244)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 118244
============================================================
"""
MATCH_EVERY = 1000  # lines
TARGETS = {1024: 3.0, 256: 3.0}  # issues 13 and 21: the ratio to grep -E per log size (MiB)
# grep stops at its first match when stdout is /dev/null, so both write to a real file.
MEASURE = (
    "import resource, subprocess, sys, time\n"
    "out = open(sys.argv[1], 'wb')\n"
    "start = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[2:], stdout=out)\n"
    "seconds = time.perf_counter() - start\n"
    "peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(seconds, peak_kib, done.returncode)\n"
)


def fill(template: str, rng: random.Random) -> str:
    return template.format(
        r=rng.randrange(8), m=rng.randrange(60), s=rng.randrange(60), pid=rng.randrange(1000, 99999),
        pid2=rng.randrange(1000, 99999), n=rng.randrange(1, 999), e=rng.randrange(100),
        st=rng.randrange(100000), l=rng.random(), lr=rng.random() * 1e-3, g=rng.random() * 3,
        t=rng.random() * 1000, d=rng.randrange(8), c=rng.randrange(32), p=rng.randrange(100),
    )  # fmt: skip


def write_log(path: Path, size_mb: int, seed: int = 1) -> int:
    """A log of about size_mb MiB; returns its number of lines."""
    rng = random.Random(seed)
    lines = []
    for index in range(20000):
        pool = MATCHES if index % MATCH_EVERY == MATCH_EVERY - 1 else NOISE
        lines.append(fill(rng.choice(pool), rng))
    block = ("\n".join(lines) + "\n").encode()
    repeats = max(1, (size_mb << 20) // len(block))
    with path.open("wb") as log:
        for _ in range(repeats):
            log.write(block)
        log.write(SUMMARY.encode())
    return repeats * len(lines) + SUMMARY.count("\n")


def measure(command: list[str], output: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit code) of one run in a fresh child."""
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(output), *command],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), int(out[1]) / 1024, int(out[2])


def doctor_command(log: Path) -> list[str]:
    return [sys.executable, "-m", "ddp_doctor", "logs", str(log), "--format", "json"]


def grep_command(log: Path) -> list[str]:
    return ["grep", "-E", "-n", "-a", grep_alternation(all_anchors()), str(log)]


def found_codes(log: Path) -> list[str]:
    done = subprocess.run(doctor_command(log), capture_output=True, text=True, check=False)
    return [finding["code"] for finding in json.loads(done.stdout)["findings"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", default="1024,256", help="sizes in MiB, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("grep") is None:
        sys.exit("grep is not on PATH")
    folder = Path(tempfile.mkdtemp(prefix="ddp-doctor-bench-"))
    try:
        small = folder / "small.log"
        write_log(small, 16)
        small_peak = measure(doctor_command(small), folder / "small.out")[1]
        print(f"pattern table: {len(all_anchors())} anchors; prefilter: "
              f"{len(PREFILTER.regexes)} passes over each chunk")  # fmt: skip
        reached, total = table_lines(small)
        print(f"lines that reached the pattern table: {reached:,} of {total:,}")
        for size_mb in (int(size) for size in args.size_mb.split(",")):
            run(folder, size_mb, args.rounds)
        print(f"peak RSS on a 16 MiB log: {small_peak:.1f} MiB (target: flat, < 100 MiB)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def table_lines(log: Path) -> tuple[int, int]:
    """(lines the pattern table saw, all lines), scanned in this process."""
    scanner = LogScanner()
    with log.open("rb") as stream:
        while chunk := stream.read(READ_BYTES):
            scanner.feed(chunk)
    scanner.findings()
    return scanner.table_lines, scanner.stats.lines


def run(folder: Path, size_mb: int, rounds: int) -> None:
    big = folder / f"big-{size_mb}.log"
    lines = write_log(big, size_mb)
    size = big.stat().st_size
    print(f"\nlog: {size / 2**20:.0f} MiB, {lines:,} lines, a match every {MATCH_EVERY} lines")
    print(f"codes found: {' '.join(found_codes(big))}")
    times: dict[str, list[float]] = {"grep": [], "doctor": []}
    peaks: dict[str, float] = {"grep": 0.0, "doctor": 0.0}
    for round_number in range(1, rounds + 1):
        for name, command in (("grep", grep_command(big)), ("doctor", doctor_command(big))):
            seconds, peak, _ = measure(command, folder / f"{name}.out")
            times[name].append(seconds)
            peaks[name] = max(peaks[name], peak)
            print(f"  round {round_number} {name:6s} {seconds:6.2f} s  peak RSS {peak:6.1f} MiB")
    grep_s, doctor_s = statistics.median(times["grep"]), statistics.median(times["doctor"])
    target = TARGETS.get(size_mb, 3.0)
    print(f"grep -E       median {grep_s:6.2f} s  ({size / 2**20 / grep_s:6.0f} MiB/s)")
    print(f"ddp-doctor    median {doctor_s:6.2f} s  ({size / 2**20 / doctor_s:6.0f} MiB/s)")
    print(f"ratio ddp-doctor / grep -E on {size_mb} MiB: {doctor_s / grep_s:.2f}x  "
          f"(target <= {target:g}x)")  # fmt: skip
    print(f"peak RSS: ddp-doctor {peaks['doctor']:.1f} MiB, grep {peaks['grep']:.1f} MiB")
    big.unlink()


if __name__ == "__main__":
    main()
