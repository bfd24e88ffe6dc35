"""Time and peak memory of check, logs and diagnose on hostile input at their limits.

Run by hand, not by CI:

    python bench/bench_limits.py            # every case (the slowest log takes about a minute)
    python bench/bench_limits.py check      # the cases whose name starts with "check"

Each case runs `python -m ddp_doctor ...` as the only child of a small measuring process, so
its peak resident memory is that child's alone (RUSAGE_CHILDREN). The target (issue 9): under
200 MB for every input up to the documented limits, time growing linearly with the input.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ddp_doctor.commands.logs import MAX_LOG_BYTES
from ddp_doctor.report_io import MAX_REPORT_BYTES
from ddp_doctor.script.files import MAX_TOKENS

ROOT = Path(__file__).resolve().parent.parent
TOKEN = re.compile(r"\w+|[^\w\s]|\n")
MEASURE = """
import os, resource, subprocess, sys, threading
argv, feed = sys.argv[2:], sys.argv[1]
stdin = None
if feed:
    stdin, writer = os.pipe()
    block = feed.encode().decode("unicode_escape").encode() * 16384
    def write():
        try:
            while True:
                os.write(writer, block)
        except OSError:
            pass
    threading.Thread(target=write, daemon=True).start()
process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL)
if stdin is not None:
    os.close(stdin)
code = process.wait()
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""
PLAIN = r"[rank0]: step 1234 loss 0.12345 lr 1e-4 throughput 123.4 samples/s\n"
MATCHING = "[rank1]:[W] NCCL WARN Connection refused, remote=[127.0.0.1]:29500 Timed out\n"


def measure(args: list[str], feed: str = "") -> tuple[float, int, int]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, feed, sys.executable, "-m", "ddp_doctor", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    code, rss = done.stdout.split()
    return time.perf_counter() - started, int(code), int(rss)


def at_tokens(unit: str, head: str = "", tail: str = "\n") -> str:
    per, fixed = len(TOKEN.findall(unit)), len(TOKEN.findall(head + tail))
    return head + unit * ((MAX_TOKENS - fixed) // per) + tail


def failed_ranks_report(size: int) -> str:
    report = json.loads((ROOT / "fixtures/jobs/healthy-2rank-gloo.json").read_text())
    job = next(p for p in report["probes"] if p["probe"] == "job")["facts"]
    rank = {
        "rank": 99999,
        "exit_code": 1,
        "stages": [{"stage": "init", "ended": True, "ok": False, "error": "Timed out"}],
    }
    count = (size - len(json.dumps(report))) // (len(json.dumps(rank)) + 2)
    job.update(
        exit_code=1, nproc=count, identities=[], ranks=[dict(rank, rank=r) for r in range(count)]
    )
    return json.dumps(report)


def cases(folder: Path) -> dict[str, Callable[[], tuple[float, int, int]]]:
    def file(name: str, text: str | bytes) -> str:
        path = folder / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)

    return {
        "check a\\n at the token limit": lambda: measure(["check", file("a.py", at_tokens("a\n"))]),
        "check f(1); at the token limit": lambda: measure(
            ["check", file("f.py", at_tokens("f(1);"))]
        ),
        "check x = 1 at the token limit": lambda: measure(
            ["check", file("x.py", at_tokens("x = 1\n"))]
        ),
        "check 9.4 MB on one line (skipped)": lambda: measure(
            ["check", file("one.py", "x=1;" * 2_350_000 + "\n")]
        ),
        "check 10 MiB comment": lambda: measure(
            ["check", file("c.py", "# " + "a" * (10 * 2**20 - 4) + "\n")]
        ),
        "logs 256 MiB plain (endless stdin)": lambda: measure(["logs", "-"], PLAIN),
        "logs 256 MiB every line matching": lambda: measure(["logs", "-"], MATCHING),
        "logs gzip bomb (1 GiB of zeros)": lambda: measure(
            ["logs", file("bomb.log.gz", gzip.compress(b"\0" * 2**30, 1))]
        ),
        "diagnose 4 MiB of failed ranks": lambda: measure(
            ["diagnose", file("ranks.json", failed_ranks_report(MAX_REPORT_BYTES))]
        ),
    }


def main() -> None:
    wanted = sys.argv[1:]
    print(
        f"limits: {MAX_TOKENS:,} tokens, logs {MAX_LOG_BYTES >> 20} MiB, "
        f"diagnose {MAX_REPORT_BYTES >> 20} MiB"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name, run in cases(Path(folder)).items():
            if wanted and not any(name.startswith(w) for w in wanted):
                continue
            seconds, code, rss = run()
            print(f"{name:40} exit {code}  {seconds:6.2f} s  {rss / 2**20:6.0f} MiB")


if __name__ == "__main__":
    main()
