"""Time and peak memory of the doctor on the small hostile inputs of issue 19
(tests/hostile.py: flight-recorder dumps, reports, logs, each under 1 MB), and the redaction
pass on rendered text of growing size (linear, or it is a bug).

Run by hand, not by CI:

    python bench/bench_hostile_inputs.py          # every case
    python bench/bench_hostile_inputs.py pickle   # the cases whose name starts with "pickle"

Each case runs `python -m ddp_doctor ...` as the only child of a small measuring process, so its
peak resident memory is that child's alone (RUSAGE_CHILDREN); the time is its wall time,
start-up included (about 0.2 s of it). Target (issue 19): every input under 1 MB in under 2 s
and 200 MB.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import hostile  # noqa: E402  (the inputs live with the tests that hold their bounds)

MEASURE = """
import resource, subprocess, sys, time
started = time.monotonic()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
seconds = time.monotonic() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(done.returncode, seconds, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime)
"""
TARGET_S, TARGET_BYTES = 2.0, 200 * 1024**2


def measure(args: list[str]) -> tuple[int, float, int, float]:
    """Exit code, wall seconds, peak bytes, CPU seconds (the fair figure on a shared machine)."""
    argv = [sys.executable, "-c", MEASURE, sys.executable, "-m", "ddp_doctor", *args]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout.split()
    return int(out[0]), float(out[1]), int(out[2]), float(out[3])


def cases(folder: Path) -> list[tuple[str, int, list[str]]]:
    found = []
    for name, files in hostile.dumps():
        target = folder / name
        target.mkdir()
        for file_name, data in files.items():
            (target / file_name).write_bytes(data)
        path = target if len(files) > 1 else target / next(iter(files))
        found.append((name, sum(map(len, files.values())), ["logs", "--format", "json", str(path)]))
    for name, data in hostile.reports():
        path = folder / f"{name}.json"
        path.write_bytes(data)
        found.append((name, len(data), ["diagnose", "-v", "--format", "markdown", str(path)]))
    for name, data in hostile.logs():
        path = folder / f"{name}.log"
        path.write_bytes(data)
        found.append((name, len(data), ["logs", "-v", str(path)]))
    return found


def redaction_is_linear() -> None:
    from ddp_doctor.trust.output import final_text

    line = "[rank3]: step 12 loss 0.25 HF_TOKEN=hf_abcdefghijklmnopqrstuv12 url https://u:p@h/x\n"
    rates = []
    for size in (1 << 20, 4 << 20, 16 << 20):
        text = line * (size // len(line))
        started = time.perf_counter()
        final_text(text, "table")
        seconds = time.perf_counter() - started
        rates.append(size / seconds / 1e6)
        print(f"final pass (redaction + inert) on {size >> 20:>3} MiB: {seconds:6.2f} s, "
              f"{rates[-1]:6.1f} MB/s")  # fmt: skip
    print(f"rate at 16 MiB / rate at 1 MiB: {rates[-1] / rates[0]:.2f} (1.0 is linear)")


def main(prefix: str = "") -> int:
    worst_s, worst_bytes, over = 0.0, 0, []
    with tempfile.TemporaryDirectory() as folder:
        print(f"{'case':<48} {'bytes':>9} {'exit':>4} {'wall s':>7} {'cpu s':>6} {'peak MB':>8}")
        for name, size, args in cases(Path(folder)):
            if not name.startswith(prefix):
                continue
            code, seconds, peak, cpu = measure(args)
            worst_s, worst_bytes = max(worst_s, cpu), max(worst_bytes, peak)
            if cpu > TARGET_S or peak > TARGET_BYTES:
                over.append(name)
            line = f"{name:<48} {size:>9} {code:>4} {seconds:>7.2f} {cpu:>6.2f} {peak / 1e6:>8.1f}"
            print(line)
    print(
        f"worst: {worst_s:.2f} CPU s, {worst_bytes / 1e6:.1f} MB; over the target: {over or 'none'}"
    )
    print(f"load average while measured: {Path('/proc/loadavg').read_text().split()[0]}")
    if not prefix:
        redaction_is_linear()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
