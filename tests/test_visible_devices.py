"""CUDA_VISIBLE_DEVICES read as the CUDA driver reads it (torch's _parse_visible_devices)."""

from __future__ import annotations

import pytest

from ddp_doctor.facts.machine import GpuFacts
from ddp_doctor.readings.visible_devices import parse_visible_devices

GPUS = [
    GpuFacts(
        i,
        "NVIDIA H100 80GB HBM3",
        f"GPU-{i:08x}-1111-2222-3333-444455556666",
        f"00000000:{i:02X}:00.0",
        1,
        0,
    )
    for i in range(4)
]


@pytest.mark.parametrize(
    ("value", "indices", "has_problem"),
    [
        ("0,abc", [0], True),  # CUDA stops at the first entry it cannot read
        ("0,1,", [0, 1], False),  # a trailing comma drops nothing
        ("0,1x", [0, 1], False),  # strtoul: leading digits count
        ("0,00", [], True),  # the same ordinal twice hides every GPU
        ("0,,1", [0], True),
        ("0,-1,2", [0], True),
        ("5", [], True),
        ("3,1", [3, 1], False),
        ("GPU-00000001", [1], False),  # a unique UUID prefix
        ("GPU-00000001,GPU-00000001-1111-2222-3333-444455556666", [], True),
        ("GPU-deadbeef", [], True),
    ],
)
def test_cuda_semantics(value: str, indices: list[int], has_problem: bool) -> None:
    visible = parse_visible_devices(value, GPUS)
    assert [gpu.index for gpu in visible.gpus] == indices
    assert bool(visible.problems) is has_problem


@pytest.mark.parametrize("value", ["", "-1"])
def test_hiding_every_gpu_on_purpose_is_not_a_problem(value: str) -> None:
    visible = parse_visible_devices(value, GPUS)
    assert visible.hides_all and visible.count == 0 and not visible.problems


def test_without_nvml_only_the_syntax_is_checked() -> None:
    assert parse_visible_devices("0,abc", []).problems
    assert not parse_visible_devices("0,7", []).problems
