"""What streaming the run's output costs: a script that prints MEGABYTES of lines, run plain
(output to /dev/null) and under `ddp-doctor trace` (each line read from the rank's FIFO,
prefixed, shown on stderr, here sent to /dev/null, and kept in the 64 KiB ring). Prints the
medians of both runs, their ratio, the doctor's own peak memory and the size of the report's
tail, which must stay bounded whatever the output. Run by hand:
`python bench/bench_trace_output.py [--megabytes 200] [--runs 3]`."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """
import sys
line = "x" * 99 + "\\n"
for _ in range(int(sys.argv[1]) * 10_000):
    sys.stdout.write(line)
"""


def traced_run(argv: list[str]) -> tuple[float, str, int]:
    """Seconds, stdout, and the doctor's own peak resident memory in KiB (VmHWM, read from
    /proc while it runs: its children, the ranks and the torch probe, are not counted)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
        peak = 0
        while process.poll() is None:
            peak = max(peak, high_water_kib(process.pid))
            time.sleep(0.05)
        out.seek(0)
        return time.monotonic() - started, out.read().decode(), peak


def high_water_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def plain_run(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"plain": [], "traced": []}
    tail = peak = 0
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "printer.py"
        script.write_text(SCRIPT)
        plain = [sys.executable, str(script), str(args.megabytes)]
        doctor = [sys.executable, "-m", "ddp_doctor", "trace", "--timeout", "600"]
        for _ in range(args.runs):
            times["plain"].append(plain_run(plain))
            seconds, out, high = traced_run([*doctor, "--format", "json", "--", *plain])
            times["traced"].append(seconds)
            peak = max(peak, high)
            trace = next(p for p in json.loads(out)["probes"] if p["probe"] == "trace")
            tail = len(trace["facts"]["output_tail"])
    median = {name: statistics.median(values) for name, values in times.items()}
    ratio = median["traced"] / median["plain"]
    print(f"{args.megabytes} MB of output, {args.runs} runs each (medians)")
    print(f"  plain {median['plain']:.2f} s  traced {median['traced']:.2f} s  ratio {ratio:.1f}")
    print(f"  traced throughput {args.megabytes / median['traced']:.0f} MB/s")
    print(f"  the doctor's peak memory {peak / 1024:.0f} MiB; the report's tail {tail} characters")


if __name__ == "__main__":
    main()
