"""Facts dataclasses to JSON and back, and the report document to and from a Report."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from ddp_doctor.codec import CodecError, from_jsonable, to_jsonable
from ddp_doctor.facts.machine import (
    FACT_TYPES,
    EnvFacts,
    GpuFacts,
    GpuProcess,
    HostFacts,
    NvmlFacts,
    PlanFacts,
    TorchDevice,
    TorchFacts,
)
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeStatus, Report, make_report
from ddp_doctor.report_io import (
    ReportError,
    load_report,
    report_from_json,
    report_to_json,
)

FACT_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "facts"


def through_json(cls: type, value: Any) -> Any:
    return from_jsonable(cls, json.loads(json.dumps(to_jsonable(value))))


# --- a sample of every field, built from the type hints ------------------------------------


def sample(tp: Any, seed: int = 3) -> Any:
    """A non-default value of type `tp`, so that a field lost on the way shows up."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in typing.get_args(tp) if a is not type(None)), seed)
    if dataclasses.is_dataclass(tp):
        return sample_instance(tp, seed)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return (sample(args[0], seed), sample(args[0], seed + 1))
        return tuple(sample(a, seed + i) for i, a in enumerate(args))
    if origin in (dict, Mapping):
        return {f"KEY_{seed}": sample(typing.get_args(tp)[1], seed)}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return list(tp)[-1]
    if tp is bool:
        return True
    if tp is int:
        return 1000 + seed
    if tp is float:
        return seed + 0.25
    if tp is str:
        return f"value-{seed}"
    if tp is Any or tp is object:
        return {"any": [seed, "x"]}
    raise AssertionError(f"no sample for {tp!r}")


def sample_instance(cls: type, seed: int = 3) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(
        **{f.name: sample(hints[f.name], seed + i) for i, f in enumerate(dataclasses.fields(cls))}
    )


def nested_dataclasses(cls: type, seen: set[type] | None = None) -> set[type]:
    seen = set() if seen is None else seen
    if cls in seen:
        return seen
    seen.add(cls)
    for hint in typing.get_type_hints(cls).values():
        for inner in _types_in(hint):
            if dataclasses.is_dataclass(inner):
                nested_dataclasses(inner, seen)
    return seen


def _types_in(tp: Any) -> list[Any]:
    args = typing.get_args(tp)
    return [tp] if not args else [t for a in args for t in _types_in(a)]


ALL_FACT_CLASSES = sorted(
    {c for cls in FACT_TYPES.values() for c in nested_dataclasses(cls)}, key=lambda c: c.__name__
)


@pytest.mark.parametrize("cls", ALL_FACT_CLASSES, ids=lambda c: c.__name__)
def test_every_facts_dataclass_round_trips_with_every_field_set(cls: type) -> None:
    value = sample_instance(cls)
    assert through_json(cls, value) == value


@pytest.mark.parametrize("cls", ALL_FACT_CLASSES, ids=lambda c: c.__name__)
def test_every_facts_dataclass_round_trips_with_defaults(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    required = {
        f.name: sample(hints[f.name])
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    value = cls(**required)
    assert through_json(cls, value) == value


def test_the_probes_facts_types_are_covered() -> None:
    names = {c.__name__ for c in ALL_FACT_CLASSES}
    assert names >= {
        "HostFacts",
        "TorchFacts",
        "TorchDevice",
        "NvmlFacts",
        "GpuFacts",
        "GpuProcess",
        "EnvFacts",
        "PlanFacts",
    }


def test_realistic_facts_round_trip() -> None:
    gpu = GpuFacts(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-5d0e1c3a-8b2f-4c71-9e6a-0f3b2d4c5a61",
        pci_bus_id="00000000:18:00.0",
        memory_total_bytes=85520809984,
        memory_used_bytes=536870912,
        compute_capability=(9, 0),
        mig_mode=False,
        processes=(GpuProcess(48213, "python", 1024**3), GpuProcess(77, None, None)),
    )
    nvml = NvmlFacts("550.54.15", "12.4", (gpu,))
    torch = TorchFacts(
        importable=True,
        version="2.5.1+cu124",
        cuda_version="12.4",
        cudnn_version=90100,
        arch_list=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
        cuda_available=True,
        device_count=1,
        devices=(TorchDevice(0, "NVIDIA H100 80GB HBM3", (9, 0), 84943978496),),
        distributed_available=True,
        nccl_available=True,
        gloo_available=True,
        nccl_version="2.21.5",
    )
    for cls, value in (
        (NvmlFacts, nvml),
        (TorchFacts, torch),
        (HostFacts, HostFacts("Linux", "5.15.0", "3.11.9", "node", shm_total_bytes=64 * 1024**2)),
        (EnvFacts, EnvFacts({"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1"})),
        (PlanFacts, PlanFacts(nproc=8, backend="nccl", require_gpu=True, min_busbw_gbps=100.0)),
    ):
        assert through_json(cls, value) == value


def test_tuples_come_back_as_tuples() -> None:
    back = through_json(TorchDevice, TorchDevice(0, "GPU", (8, 6), 1))
    assert back.capability == (8, 6) and isinstance(back.capability, tuple)


def test_missing_optional_fields_take_their_defaults_and_unknown_fields_are_ignored() -> None:
    facts = from_jsonable(TorchFacts, {"importable": False, "added_by_a_newer_version": 1})
    assert facts == TorchFacts(importable=False)


# --- wrong types -----------------------------------------------------------------------------

HOST = {"system": "Linux", "release": "6.1", "python_version": "3.11.9", "hostname": "node"}


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        (HostFacts, "not an object"),
        (HostFacts, [HOST]),
        (HostFacts, {**HOST, "system": 1}),
        (HostFacts, {**HOST, "cpu_count": "224"}),
        (HostFacts, {**HOST, "cpu_count": True}),
        (HostFacts, {**HOST, "cpu_count": 2.5}),
        (HostFacts, {**HOST, "wsl": "false"}),
        (HostFacts, {**HOST, "wsl": None}),
        (HostFacts, {"system": "Linux"}),
        (TorchFacts, {"importable": True, "arch_list": "sm_90"}),
        (TorchFacts, {"importable": True, "arch_list": ["sm_90", 90]}),
        (TorchFacts, {"importable": True, "devices": [{"index": 0, "name": "GPU"}]}),
        (TorchDevice, {"index": 0, "name": "GPU", "capability": [9], "total_memory_bytes": 1}),
        (TorchDevice, {"index": 0, "name": "GPU", "capability": "9.0", "total_memory_bytes": 1}),
        (EnvFacts, {"variables": ["NCCL_DEBUG=INFO"]}),
        (EnvFacts, {"variables": {"NCCL_DEBUG": 1}}),
        (PlanFacts, {"min_busbw_gbps": "fast"}),
        (
            NvmlFacts,
            {"driver_version": "550.54.15", "cuda_driver_version": 12.4, "gpus": []},
        ),
        (
            GpuFacts,
            {
                "index": 0,
                "name": "GPU",
                "uuid": "GPU-1",
                "pci_bus_id": "00000000:18:00.0",
                "memory_total_bytes": 1,
                "memory_used_bytes": 0,
                "processes": [{"pid": "48213", "name": None, "used_memory_bytes": None}],
            },
        ),
        (ProbeStatus, "finished"),
    ],
)
def test_wrong_types_raise_codec_error(cls: type, data: Any) -> None:
    with pytest.raises(CodecError):
        from_jsonable(cls, data)


def test_codec_errors_say_where() -> None:
    with pytest.raises(CodecError) as caught:
        from_jsonable(TorchFacts, {"importable": True, "devices": [{"index": "0"}]})
    assert "devices[0]" in str(caught.value)


# --- the report document ---------------------------------------------------------------------


def fixture_report(name: str) -> Report:
    saved = load_report(FACT_FIXTURES / f"{name}.json")
    report = make_report(saved.probes, judge(saved.probes))
    return dataclasses.replace(report, created="2025-03-14T09:26:53+00:00")


@pytest.mark.parametrize(
    "name", ["healthy-8xh100", "windows-laptop-1gpu", "gpu-memory-taken", "probe-timed-out"]
)
def test_report_round_trips(name: str) -> None:
    report = fixture_report(name)
    document = json.loads(json.dumps(report_to_json(report)))
    assert report_from_json(document) == report


def test_report_document_has_the_schema_keys() -> None:
    document = report_to_json(fixture_report("windows-laptop-1gpu"))
    assert set(document) == {
        "schema_version",
        "tool_version",
        "created",
        "command",
        "subject",
        "probes",
        "findings",
    }
    assert document["schema_version"] == 1
    for probe in document["probes"]:
        assert set(probe) == {"probe", "status", "duration_s", "facts", "error"}
    for finding in document["findings"]:
        assert set(finding) == {
            "code",
            "name",
            "severity",
            "message",
            "fix",
            "location",
            "evidence",
        }


def test_a_probe_of_an_unknown_kind_keeps_its_status_without_facts() -> None:
    document = report_to_json(fixture_report("healthy-8xh100"))
    document["probes"].append(
        {"probe": "from-the-future", "status": "ok", "duration_s": 1, "facts": {"x": 1}}
    )
    report = report_from_json(document)
    future = report.probes[-1]
    assert (future.probe, future.status, future.facts, future.error) == (
        "from-the-future",
        ProbeStatus.OK,
        None,
        None,
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.pop("schema_version"),
        lambda d: d.update(schema_version=2),
        lambda d: d.update(probes={"host": {}}),
        lambda d: d.update(findings="none"),
        lambda d: d["probes"][2].update(facts=[1, 2]),
        lambda d: d["probes"][2]["facts"].update(cpu_count="many"),
        lambda d: d["probes"][2].update(status="exploded"),
        lambda d: d["probes"][2].pop("probe"),
        lambda d: d["probes"][2].update(duration_s="slow"),
        lambda d: d["probes"].append("host"),
        lambda d: d["findings"].append({"code": "DDP008"}),
        lambda d: d["findings"].append(
            {"code": "DDP008", "name": "n", "severity": "fatal", "message": "m"}
        ),
    ],
)
def test_malformed_documents_raise_report_error(change: Any) -> None:
    document = report_to_json(fixture_report("docker-small-shm"))
    assert document["probes"][2]["probe"] == "host"
    change(document)
    with pytest.raises(ReportError):
        report_from_json(document)


def test_not_an_object_raises_report_error() -> None:
    for data in ([], "report", None, 1):
        with pytest.raises(ReportError):
            report_from_json(data)
