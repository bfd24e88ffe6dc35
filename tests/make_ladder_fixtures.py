"""Writes fixtures/jobs/ladder-*.json: the recorded healthy four-host report
(isolate-recorded-healthy-node0.json) as if its job had run NCCL and printed NCCL's INFO lines
of tests/ladder_lines.py (sources there): edited, not recorded (no GPU nodes here). Run by
hand: `python tests/make_ladder_fixtures.py`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import ladder_lines as lines  # noqa: E402
from record_multinode_fixtures import write  # noqa: E402

BASE = ROOT / "fixtures" / "jobs" / "isolate-recorded-healthy-node0.json"
CASES = {
    "ladder-sockets-no-ib-node0": (
        lines.SOCKETS_NO_DEVICE,
        ["DDP221"],
        "NCCL between nodes over sockets: NET/IB found no device (NVIDIA/nccl issue #941)",
    ),
    "ladder-ib-with-gdr-node0": (
        lines.ROCE_WITH_GDR,
        [],
        "NCCL between nodes over RoCE with GPUDirect RDMA (NVIDIA/nccl-tests issue #185)",
    ),
}


def main() -> None:
    for name, (output, expect, description) in CASES.items():
        report = json.loads(BASE.read_text())
        job = next(p for p in report["probes"] if p["probe"] == "job")["facts"]
        job["backend"] = "nccl"
        job["output_tail"] = output
        report["description"] = f"{description} (edited from {BASE.stem})"
        report["expect"] = expect
        write(name, report)


if __name__ == "__main__":
    main()
