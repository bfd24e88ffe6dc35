"""Bus bandwidth per size from ddp-doctor's job against a plain all_reduce timing loop.

The reference is the loop anyone would write: warm up, barrier, time `iters` back-to-back
all_reduce calls, divide; busbw = size/time x 2(n-1)/n. Both use the same sizes, ranks and
backend; runs alternate and each size's median over the runs is compared. Run by hand:
`python bench/bench_busbw.py [--runs 15] [--sizes 1M:16M:4]`. Target: within 10% from 1 MiB up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REFERENCE = """
import json, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
n = dist.get_world_size()
rows = {}
for size in map(int, sys.argv[2].split(",")):
    t = torch.ones(size // 4)
    for _ in range(2):
        dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(int(sys.argv[3])):
        dist.all_reduce(t)
    seconds = (time.perf_counter() - start) / int(sys.argv[3])
    rows[size] = size / seconds / 1e9 * 2 * (n - 1) / n
if dist.get_rank() == 0:
    open(sys.argv[1], "w").write(json.dumps(rows))
dist.destroy_process_group()
"""


def doctor_busbw(sizes: str, iters: int, nproc: int) -> dict[int, float]:
    out = subprocess.run(
        [
            "ddp-doctor",
            "run",
            "--format",
            "json",
            "--nproc",
            str(nproc),
            "--sizes",
            sizes,
            "--iters",
            str(iters),
        ],
        capture_output=True,
        text=True,
    ).stdout
    job = next(p for p in json.loads(out)["probes"] if p["probe"] == "job")["facts"]
    return {row["size_bytes"]: row["busbw_gbps"] for row in job["bandwidth"]}


def reference_busbw(
    script: Path, sizes: list[int], iters: int, nproc: int, folder: str
) -> dict[int, float]:
    result = Path(folder) / "reference.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            str(script),
            str(result),
            ",".join(map(str, sizes)),
            str(iters),
        ],
        check=True,
        capture_output=True,
    )
    return {int(k): v for k, v in json.loads(result.read_text()).items()}


def main() -> None:
    from ddp_doctor.patient.bandwidth import parse_sizes

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--sizes", default="1M:16M:4")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    doctor: dict[int, list[float]] = {s: [] for s in sizes}
    reference: dict[int, list[float]] = {s: [] for s in sizes}
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "reference_loop.py"
        script.write_text(REFERENCE)
        for _ in range(args.runs):
            for size, value in doctor_busbw(args.sizes, args.iters, args.nproc).items():
                doctor[size].append(value)
            for size, value in reference_busbw(
                script, sizes, args.iters, args.nproc, folder
            ).items():
                reference[size].append(value)
    print(f"runs: {args.runs} each, interleaved; {args.nproc} ranks, gloo, iters {args.iters}")
    print(f"{'size (B)':>10} {'doctor busbw':>14} {'reference':>11} {'ratio':>7}")
    for size in sizes:
        d, r = statistics.median(doctor[size]), statistics.median(reference[size])
        print(f"{size:>10} {d:>11.3f} GB/s {r:>6.3f} GB/s {d / r:>7.2f}")


if __name__ == "__main__":
    main()
