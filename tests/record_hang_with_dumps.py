"""Records one real traced hang and its ranks' flight-recorder dumps as fixtures, for the fast
tier's one-verdict test (tests/test_collective_verdicts.py).

Run by hand on a CPU machine from the repository root: `python tests/record_hang_with_dumps.py`.
It traces tests/hang_with_dumps.py (2 gloo ranks) and writes
fixtures/trace/reports/hang-with-dumps.json (what `trace --format json` printed) and
fixtures/trace/reports/hang-with-dumps/fr_trace_{0,1} (the dumps, read as plain data and
written back as plain pickles), with this machine's folders replaced in both.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ddp_doctor.flightrec.safe_pickle import load_plain

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "trace" / "reports"
FOLDERS = ((str(Path(sys.prefix)), "/opt/venv"), (str(ROOT), "/home/user/project"))


def replaced(value: Any) -> Any:
    if isinstance(value, str):
        for mine, public in FOLDERS:
            value = value.replace(mine, public)
        return value
    if isinstance(value, dict):
        return {replaced(k): replaced(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(replaced(v) for v in value)
    return value


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        dumps = Path(folder)
        command = [sys.executable, "-m", "ddp_doctor", "trace", "--format", "json"]
        command += ["--hang-after", "3", "--timeout", "90", "--", "torchrun"]
        command += ["--nproc-per-node", "2", "tests/hang_with_dumps.py", str(dumps)]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=150)
        report = replaced(json.loads(done.stdout))
        (OUT / "hang-with-dumps.json").write_text(json.dumps(report, indent=2) + "\n")
        target = OUT / "hang-with-dumps"
        target.mkdir(exist_ok=True)
        for dump in sorted(dumps.glob("fr_trace_*")):
            plain = replaced(load_plain(dump.read_bytes()))
            (target / dump.name).write_bytes(pickle.dumps(plain, protocol=2))
    print(f"exit {done.returncode}: {[f['code'] for f in report['findings']]}")


if __name__ == "__main__":
    main()
