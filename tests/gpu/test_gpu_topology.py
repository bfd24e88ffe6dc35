"""The real topology and bandwidth verdict of whatever GPUs this machine has; with OUT set (as
bench/gpu_check.sh does) the topology facts and the run's report are written there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_doctor.codec import to_jsonable
from ddp_doctor.probes.topology import collect_topology

pytestmark = pytest.mark.gpu


def keep(name: str, data: object) -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def test_topology_from_nvml(gpu_count: int) -> None:
    facts = collect_topology()
    keep("topology.json", to_jsonable(facts))
    assert len(facts.gpus) >= 1 and len({g.pci_bus_id for g in facts.gpus}) == len(facts.gpus)
    count = len(facts.gpus)
    assert len(facts.pairs) == count * (count - 1) // 2
    for gpu in facts.gpus:
        assert gpu.pcie.max_gen and gpu.pcie.max_width, gpu  # every NVIDIA GPU answers these
        assert gpu.pcie.current_gen and gpu.pcie.current_gen <= gpu.pcie.max_gen
        assert all(link.remote_bus_id for link in gpu.active_nvlinks)
    for pair in facts.pairs:
        assert pair.common_ancestor in (
            "internal",
            "single",
            "multiple",
            "hostbridge",
            "node",
            "system",
        )
        assert pair.p2p_read is not None


def test_run_samples_links_under_load_and_gives_a_verdict(gpu_count: int) -> None:
    from ddp_doctor.cli import cli

    args = ["run", "--format", "json", "--timeout", "150", "--ops", "all_reduce,all_gather"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    keep("run-topology.json", report)
    probes = {p["probe"]: p for p in report["probes"]}
    topology = probes["topology"]["facts"]
    assert probes["topology"]["status"] == "ok"
    note = topology["under_load"]
    assert note.startswith(("sampled", "not sampled: the bandwidth stage ended")), note
    for gpu in topology["gpus"]:
        sample = gpu["pcie_under_load"]
        if sample is not None:
            assert 1 <= sample["gen"] <= gpu["pcie"]["max_gen"]
    tables = {t["op"]: t for t in report["bandwidth"]}
    assert set(tables) == {"all_reduce", "all_gather"}
    for table in tables.values():
        if gpu_count >= 2:
            assert table["expected_gbps"] is not None, table["basis"]
        else:
            assert table["expected_gbps"] is None and "one GPU" in table["basis"]
