"""Time and memory of the one collective analysis (doctor/readings/collective_progress.py) as
the ranks and the flight recorder's buffer grow, and of `logs DIR` on full-size dumps.

Run by hand, not by CI:

    python bench/bench_collective_progress.py

Each case is a job whose ranks all ran the same N collectives (torch's default buffer keeps
2000 entries per rank) except one rank that stopped two short, so the analysis lines every
rank up over the whole buffer and names the stall. The target: time linear in ranks x entries,
well under a second for 64 ranks of 2000 entries; `logs` on 8 full dumps in a few seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from ddp_doctor.facts.collectives import (
    COMPLETED,
    FLIGHT_RECORDER,
    PENDING,
    CollectiveCall,
    RankCollectives,
)
from ddp_doctor.readings.collective_progress import collective_progress

ENTRIES = 2000  # TORCH_FR_BUFFER_SIZE's default


def records(ranks: int, entries: int) -> list[RankCollectives]:
    def call(seq: int, state: str = COMPLETED) -> CollectiveCall:
        return CollectiveCall(seq, "all_reduce", shapes=((1024,),), dtypes=("float32",),
                              state=state, source=FLIGHT_RECORDER)  # fmt: skip

    full = (*(call(s) for s in range(1, entries)), call(entries, PENDING))
    return [RankCollectives(r, full[:-2] if r == ranks - 1 else full) for r in range(ranks)]


def analysis(ranks: int, entries: int) -> tuple[float, float]:
    given = records(ranks, entries)
    started = time.perf_counter()
    progress = collective_progress(given)
    seconds = time.perf_counter() - started
    tracemalloc.start()  # a second run for memory: tracing slows it down
    collective_progress(given)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    (stall,) = progress.stalls
    assert stall.seq == entries - 1 and list(stall.elsewhere) == [ranks - 1]
    return seconds, peak


def entry(seq: int, retired: bool = True) -> dict[str, object]:
    return {
        "collective_seq_id": seq, "p2p_seq_id": 0, "profiling_name": "nccl:all_reduce",
        "process_group": ["0", "default_pg"], "input_sizes": [[1024]], "input_dtypes": ["Float"],
        "output_sizes": [[1024]], "output_dtypes": ["Float"], "state": "completed" if retired
        else "started", "retired": retired, "is_p2p": False, "timeout_ms": 600000,
    }  # fmt: skip


def logs_on_dumps(ranks: int, entries: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        for rank in range(ranks):
            count = entries - 2 if rank == ranks - 1 else entries
            dump = [entry(s, s < entries) for s in range(1, count + 1)]
            document = {"version": "2.10", "entries": dump, "pg_config": {}, "pg_status": {}}
            (Path(folder) / f"nccl_trace_rank_{rank}.json").write_text(json.dumps(document))
        command = [sys.executable, "-m", "ddp_doctor", "logs", folder, "--format", "json"]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        seconds = time.perf_counter() - started
        codes = [f["code"] for f in json.loads(done.stdout)["findings"]]
        assert codes == ["DDP302"], (codes, done.stderr[-500:])
        return seconds


def main() -> None:
    print(f"{'ranks':>6} {'entries':>8} {'analysis s':>11} {'peak MiB':>9}")
    for ranks in (2, 8, 64, 256):
        seconds, peak = analysis(ranks, ENTRIES)
        print(f"{ranks:>6} {ENTRIES:>8} {seconds:>11.3f} {peak:>9.1f}")
    print(f"logs DIR, 8 JSON dumps of {ENTRIES} entries: {logs_on_dumps(8, ENTRIES):.2f} s")


if __name__ == "__main__":
    main()
