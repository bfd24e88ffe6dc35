"""The GPU machines of fixtures/bandwidth (tests/make_bandwidth_fixtures.py): each gives its
verdict, the codes and the expected busbw per collective, through the rules and through
`ddp-doctor diagnose`, and the README names every one of them."""

from __future__ import annotations

import json
from pathlib import Path

import make_bandwidth_fixtures
import pytest
from bandwidth_machines import MACHINES

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.judge import judge
from ddp_doctor.model import Finding, Severity
from ddp_doctor.readings.expected_busbw import bandwidth_tables
from ddp_doctor.report_io import load_report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "bandwidth"
NAMES = sorted(path.stem for path in FIXTURES.glob("*.json"))
NEW_CODES = ("DDP320", "DDP321", "DDP322", "DDP323", "DDP324", "DDP325")


def document(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def findings(name: str) -> list[Finding]:
    return judge(load_report(FIXTURES / f"{name}.json").probes)


def test_every_machine_of_the_issue_is_here() -> None:
    assert set(NAMES) == set(MACHINES)
    assert len(NAMES) >= 10


@pytest.mark.parametrize("name", NAMES)
def test_fixture_gives_its_verdict(name: str) -> None:
    saved = document(name)
    assert saved["description"] and "Verdict" in saved["description"]
    found = findings(name)
    assert sorted({f.code for f in found}) == sorted(saved["expect"])
    tables = bandwidth_tables(FactSet.of(load_report(FIXTURES / f"{name}.json").probes))
    assert {t["op"]: t["expected_gbps"] for t in tables} == saved["verdict"]


@pytest.mark.parametrize("name", NAMES)
def test_fixture_facts_are_what_the_probes_produce_today(name: str) -> None:
    """Rebuilt from the machine description, the probes' facts are the saved ones."""
    rebuilt = make_bandwidth_fixtures.build(MACHINES[name])
    assert rebuilt["probes"] == document(name)["probes"]


@pytest.mark.parametrize("name", NAMES)
def test_diagnose_replays_the_verdict(invoke, name: str) -> None:  # type: ignore[no-untyped-def]
    saved = document(name)
    result = invoke("diagnose", str(FIXTURES / f"{name}.json"), "--format", "json")
    assert result.exit_code == (1 if "DDP325" in saved["expect"] else 0), result.output
    replayed = json.loads(result.stdout)
    assert sorted({f["code"] for f in replayed["findings"]}) == sorted(saved["expect"])
    tables = replayed.get("bandwidth", [])
    assert {t["op"]: t["expected_gbps"] for t in tables} == saved["verdict"]
    table = invoke("diagnose", str(FIXTURES / f"{name}.json"))
    if saved["verdict"]:
        assert "expected (GB/s)" in table.stdout and "% of expected" in table.stdout


def evidence(name: str, code: str) -> list[dict]:
    return [dict(f.evidence) for f in findings(name) if f.code == code]


def test_link_trained_at_x8_is_the_named_cause() -> None:
    (link,) = evidence("gen4-x8-under-load", "DDP320")
    assert (link["gpu"], link["gen_under_load"], link["width_under_load"]) == (2, 4, 8)
    assert (link["max_gen"], link["max_width"]) == (4, 16)
    (low,) = evidence("gen4-x8-under-load", "DDP303")
    assert low["expected_gbps"] == 24.0 and low["floor_gbps"] == 12.0
    assert any("DDP320" in cause and "GPU 2" in cause for cause in low["causes"])


def test_idle_gen1_link_is_not_judged() -> None:
    saved = load_report(FIXTURES / "idle-link-gen1.json")
    topology = FactSet.of(saved.probes).topology
    assert topology is not None
    assert {g.pcie.current_gen for g in topology.gpus} == {1}  # the idle reading
    assert {g.pcie_under_load.gen for g in topology.gpus if g.pcie_under_load} == {4}
    assert not evidence("idle-link-gen1", "DDP320")


def test_nvlink_down_names_gpu_and_link() -> None:
    (down,) = evidence("h100-nvlink-down", "DDP321")
    assert (down["gpu"], down["active"], down["usual"], down["down"]) == (5, 17, 18, [7])


def test_p2p_disable_is_the_cause_of_the_low_busbw() -> None:
    (variable,) = evidence("nccl-p2p-disable", "DDP324")
    assert variable == {"variable": "NCCL_P2P_DISABLE", "value": "1"}
    (low,) = evidence("nccl-p2p-disable", "DDP303")
    assert low["percent_of_expected"] < 5 and "NCCL_P2P_DISABLE=1" in low["causes"][0]


def test_blocked_p2p_and_far_ranks_and_fabric() -> None:
    (blocked,) = evidence("acs-blocks-p2p", "DDP322")
    assert len(blocked["pairs"]) == 6 and "ACS" in blocked["why"]
    assert blocked["iommu_groups"] == {"0": 41, "1": 42, "2": 43, "3": 44}
    (far,) = evidence("two-sockets-4gpu", "DDP323")
    assert (far["ranks"], far["gpus"], far["gpu_numa_nodes"]) == ([2, 3], [2, 3], [1])
    fabric = [f for f in findings("fabric-manager-down") if f.code == "DDP325"]
    assert [f.evidence["gpu"] for f in fabric] == list(range(8))
    assert {f.severity for f in fabric} == {Severity.ERROR}


def test_no_p2p_on_geforce_is_expected_not_a_finding() -> None:
    (table,) = bandwidth_tables(FactSet.of(load_report(FIXTURES / "rtx4090-no-p2p.json").probes))
    assert "host memory" in str(table["basis"]) and not findings("rtx4090-no-p2p")


@pytest.mark.parametrize("code", NEW_CODES)
def test_each_new_rule_fires_somewhere_and_is_silent_somewhere(code: str) -> None:
    fired = {name for name in NAMES if code in document(name)["expect"]}
    assert fired and fired != set(NAMES)


def test_readme_names_every_fixture() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [name for name in NAMES if f"fixtures/bandwidth/{name}.json" not in readme]
    assert not missing
