"""Rank-0 tests spelt by a program's own backend layer (DALLE-pytorch's DistributedBackend:
`is_root_worker()`, `is_local_root_worker()`), and the look-alikes that test no rank."""

from __future__ import annotations

import ast

import pytest

from ddp_doctor.script import guards
from ddp_doctor.script.facts import NONZERO, ZERO


def _classify(text: str) -> str | None:
    return guards.classify(ast.parse(text, mode="eval").body)


@pytest.mark.parametrize(
    ("test", "polarity"),
    [
        ("distr_backend.is_root_worker()", ZERO),
        ("distributed_utils.backend.is_local_root_worker()", ZERO),
        ("not distr_backend.is_root_worker()", NONZERO),
        ("i % 10 == 0 and backend.is_root_rank", ZERO),
        ("comm.is_root_process()", ZERO),
        ("node.is_root()", None),  # a tree's root
        ("self.root_dir", None),
        ("args.root", None),
    ],
)
def test_backend_layer_predicates(test: str, polarity: str | None) -> None:
    assert _classify(test) == polarity
