"""Every trace fixture as a real 2-rank gloo job under `ddp-doctor trace`: each finding that
names a line of the script is on a line marked `# expect: CODE`, and nothing else is found
there; findings without a line are listed per case; no process of the job is left.

A real job on this 2-core machine takes 4-10 s; the hangs are named after --hang-after 3 s
of quiet. Every case is bounded by --timeout and by pytest's own timeout.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tracing import TRACE_FIXTURES, Traced, assert_nothing_left, expected_markers, trace

pytestmark = pytest.mark.slow  # real jobs, subprocess runs or wheel builds

TIMEOUT_S = 90  # generous: other helpers' jobs share these two cores
TORCHRUN = ["torchrun", "--nproc-per-node", "2"]


@dataclass(frozen=True)
class Case:
    script: str
    without_line: frozenset[str] = frozenset()  # codes found with no line of the script
    outcome: str = "finished"
    needs_folder: bool = False  # the script takes an output folder as its argument
    options: tuple[str, ...] = field(default=())


CASES = [
    Case("set_epoch_missing.py"),
    Case("save_on_every_rank.py", needs_folder=True),
    Case("hang_under_rank_guard.py", outcome="hang", options=("--hang-after", "3")),
    # gloo aborts a rank (SIGABRT, no Python exception) on the size mismatch.
    Case("allreduce_shape_mismatch.py", without_line=frozenset({"DDP307"})),
    Case("unused_parameter.py"),
    Case("rank_raises.py"),
    Case("clean_ddp.py", needs_folder=True),
    Case("ignores_sigterm.py", outcome="hang", options=("--hang-after", "3")),
    Case("no_process_group.py", without_line=frozenset({"DDP602"})),
    Case("sampler_shard_mismatch.py"),
    Case("sampler_missing.py"),
    Case("uneven_batches.py", outcome="hang", options=("--hang-after", "3")),
]


_TRACED: dict[str, tuple[Traced, Path]] = {}


def traced_case(case: Case, tmp_path_factory: pytest.TempPathFactory) -> tuple[Traced, Path]:
    """Each fixture runs once per session; the tests below read the same run."""
    if case.script not in _TRACED:
        folder = tmp_path_factory.mktemp(case.script.removesuffix(".py"))
        args = [str(folder)] if case.needs_folder else []
        command = [*TORCHRUN, str(TRACE_FIXTURES / case.script), *args]
        _TRACED[case.script] = (
            trace(folder, command, "--timeout", str(TIMEOUT_S), *case.options),
            folder,
        )
    return _TRACED[case.script]


def case_named(script: str) -> Case:
    return next(c for c in CASES if c.script == script)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.script.removesuffix(".py"))
def test_trace_fixture(case: Case, tmp_path_factory: pytest.TempPathFactory) -> None:
    script = TRACE_FIXTURES / case.script
    traced, folder = traced_case(case, tmp_path_factory)
    assert traced.at_lines(script) == expected_markers(script), traced.findings
    assert traced.without_location() == case.without_line, traced.findings
    assert traced.trace["outcome"] == case.outcome
    assert traced.seconds < TIMEOUT_S + 10
    for finding in traced.findings:
        if finding["location"]:
            assert finding["evidence"].get("seen") == "at runtime", finding
    expected_exit = 1 if any(f["severity"] == "error" for f in traced.findings) else 0
    assert traced.exit_code == expected_exit
    assert_nothing_left(folder)


@pytest.mark.timeout(180)
def test_the_clean_script_ends_every_rank_normally(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    traced, folder = traced_case(case_named("clean_ddp.py"), tmp_path_factory)
    ranks = traced.trace["ranks"]
    assert [(r["rank"], r["end"], r["exit_code"], r["steps"], r["epochs"]) for r in ranks] == [
        (0, "returned", 0, 4, 2),
        (1, "returned", 0, 4, 2),
    ]
    assert all(r["init"]["backend"] == "gloo" and r["init"]["world_size"] == 2 for r in ranks)
    sampler = ranks[0]["samplers"][0]
    assert sampler["shuffle"] and sampler["epochs"] == [0, 1]
    assert ranks[0]["loaders"][0]["sampler_kind"] == "DistributedSampler"
    assert [s["target"] for s in ranks[0]["saves"]] == [str(folder / "checkpoint.pt")]
    assert ranks[1]["saves"] == []
    assert traced.findings == [] and traced.exit_code == 0


@pytest.mark.timeout(180)
def test_the_hang_names_collective_ranks_and_lines(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    traced, _ = traced_case(case_named("hang_under_rank_guard.py"), tmp_path_factory)
    script = TRACE_FIXTURES / "hang_under_rank_guard.py"
    hang = next(f for f in traced.findings if f["code"] == "DDP302")
    assert hang["evidence"]["collective"] == "all_reduce"
    assert hang["evidence"]["waiting_ranks"] == [0]
    assert list(hang["evidence"]["ranks_elsewhere"]) == ["1"]
    assert "barrier" in hang["evidence"]["ranks_elsewhere"]["1"]
    assert f"{script.name}:16" in hang["evidence"]["ranks_elsewhere"]["1"]
    forensics = traced.trace["forensics"]
    where = {r["rank"]: (r["where"]["line"], r["waiting"]) for r in forensics["ranks"]}
    assert where == {0: (15, "collective"), 1: (16, "collective")}
    assert Counter(r["end"] for r in traced.trace["ranks"]) == {"stopped": 2}


@pytest.mark.timeout(180)
def test_a_hang_in_ddps_own_all_reduce_is_read_from_the_flight_recorder(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    traced, _ = traced_case(case_named("uneven_batches.py"), tmp_path_factory)
    hang = next(f for f in traced.findings if f["code"] == "DDP302")
    assert (hang["evidence"]["collective"], hang["evidence"]["waiting_ranks"]) == (
        "all_reduce",
        [0],
    )
    assert "barrier" in hang["evidence"]["ranks_elsewhere"]["1"]
    waiting = {r["rank"]: r["waiting"] for r in traced.trace["forensics"]["ranks"]}
    assert waiting == {0: "backward", 1: "collective"}


@pytest.mark.timeout(180)
def test_a_rank_killed_by_gloo_keeps_the_collectives_written_before(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    traced, _ = traced_case(case_named("allreduce_shape_mismatch.py"), tmp_path_factory)
    mismatch = next(f for f in traced.findings if f["code"] == "DDP304")
    assert mismatch["evidence"]["calls"] == {
        "0": "all_reduce [4] float32",
        "1": "all_reduce [8] float32",
    }
