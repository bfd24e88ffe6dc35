"""Small hostile inputs (issue 19), each under 1 MB: flight-recorder dumps, reports and logs that
once hung the doctor or took gigabytes. Shared by tests/test_hostile_inputs.py (bounds held)
and bench/bench_hostile_inputs.py (the real figures)."""

from __future__ import annotations

import json
import pickle
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "fixtures" / "jobs" / "healthy-2rank-gloo.json"
MULTINODE = ROOT / "fixtures" / "jobs" / "multinode-healthy-node0.json"
LIMIT_BYTES = 1 << 20


def _entry(seq: int, op: str = "all_reduce") -> dict[str, Any]:
    return {
        "collective_seq_id": seq,
        "profiling_name": f"gloo:{op}",
        "process_group": ["0", "default_pg"],
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "output_sizes": [[4]],
        "output_dtypes": ["Float"],
        "state": "completed",
        "retired": True,
        "is_p2p": False,
        "timeout_ms": 600000,
    }


def _dump(entries: list[Any]) -> dict[str, Any]:
    return {
        "version": "2.10",
        "entries": entries,
        "pg_config": {"0": {"desc": "default_pg", "ranks": "[0, 1]"}},
    }


def _shared_lists(depth: int) -> bytes:
    shared: list[Any] = []
    for _ in range(depth):
        shared = [shared, shared]
    return pickle.dumps({"entries": shared}, protocol=4)


def _nested_by(opcodes: bytes, close: bytes, count: int) -> bytes:
    return b"\x80\x04" + opcodes * count + close * (count - 1) + b"."


def _many_appends(count: int) -> bytes:
    return b"\x80\x04}\x94(\x8c\x07entries\x94]\x94" + b"Na" * count + b"u."


def _huge_long() -> bytes:
    number = (1 << (8 * 400_000)) - 1
    return pickle.dumps(_dump([{**_entry(0), "collective_seq_id": number}]), protocol=4)


def _mutated(seed: int) -> bytes:
    rng = random.Random(seed)
    data = bytearray(pickle.dumps(_dump([_entry(n) for n in range(200)]), protocol=4))
    for _ in range(rng.randint(1, 40)):
        data[rng.randrange(2, len(data))] = rng.randrange(256)
    return bytes(data)


def dumps() -> Iterator[tuple[str, dict[str, bytes]]]:
    """(name, {file name: bytes}): one rank's dump, or a folder of two ranks."""
    yield "pickle-shared-lists", {"nccl_trace_rank_0": _shared_lists(60)}
    yield "pickle-deep-append", {"nccl_trace_rank_0": _nested_by(b"]", b"a", 100_000)}
    yield "pickle-deep-tuple1", {"nccl_trace_rank_0": b"\x80\x04N" + b"\x85" * 200_000 + b"."}
    deep_dicts = b"\x80\x04}" + b"N}" * 100_000 + b"s" * 100_000 + b"."
    yield "pickle-deep-setitem", {"nccl_trace_rank_0": deep_dicts}
    yield "pickle-deep-mark", {"nccl_trace_rank_0": _nested_by(b"(", b"l", 100_000)}
    yield "pickle-dup-doubling", {"nccl_trace_rank_0": b"\x80\x04]" + b"2a" * 100 + b"."}
    yield "pickle-many-appends", {"nccl_trace_rank_0": _many_appends(450_000)}
    yield "pickle-huge-long", {"nccl_trace_rank_0": _huge_long()}
    for seed in range(6):
        yield f"pickle-mutated-{seed}", {"nccl_trace_rank_0": _mutated(seed)}
    far = [_dump([_entry(0), _entry(10**15)]), _dump([_entry(0), _entry(10**15 - 1)])]
    yield (
        "json-far-sequence-ids",
        {f"nccl_trace_rank_{r}.json": json.dumps(d).encode() for r, d in enumerate(far)},
    )
    yield (
        "json-deep",
        {"nccl_trace_rank_0.json": b'{"entries": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"},
    )
    yield (
        "json-huge-int",
        {"nccl_trace_rank_0.json": b'{"entries": [{"collective_seq_id": ' + b"9" * 5000 + b"}]}"},
    )
    ranks = json.dumps({"entries": [], "pg_config": {"0": {"ranks": "[" + "9" * 900_000 + "]"}}})
    yield "json-huge-ranks-text", {"nccl_trace_rank_0.json": ranks.encode()}
    many = _dump([_entry(n) for n in range(3000)])
    yield (
        "json-many-entries",
        {f"nccl_trace_rank_{r}.json": json.dumps(many).encode() for r in (0, 1)},
    )


def _every_int(value: Any, replace: Callable[[int], Any]) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return replace(value)
    if isinstance(value, dict):
        return {k: _every_int(v, replace) for k, v in value.items()}
    if isinstance(value, list):
        return [_every_int(v, replace) for v in value]
    return value


def _facts_mutated(path: Path, replace: Callable[[int], Any]) -> bytes:
    report = json.loads(path.read_text())
    for probe in report["probes"]:
        probe["facts"] = _every_int(probe["facts"], replace)
    return json.dumps(report).encode()


def reports() -> Iterator[tuple[str, bytes]]:
    missing = sorted((ROOT / "fixtures" / "jobs").glob("multinode-*missing*.json"))
    for source in missing:
        yield f"{source.stem}-ints-1e12", _facts_mutated(source, lambda n: 10**12)
    for source in (HEALTHY, MULTINODE):
        name = source.stem
        yield f"{name}-ints-1e12", _facts_mutated(source, lambda n: 10**12)
        yield f"{name}-ints-negative", _facts_mutated(source, lambda n: -(10**6))
        yield f"{name}-ints-4000-digits", _facts_mutated(source, lambda n: 10**3999)
        yield f"{name}-ints-as-floats", _facts_mutated(source, lambda n: 1e308)
    report = json.loads(HEALTHY.read_text())
    report["probes"][0]["facts"] = {"deep": json.loads("[" * 60 + "]" * 60)}
    yield "report-deep-facts", json.dumps(report).encode()
    yield "report-deep", b"[" * 100_000 + b"]" * 100_000
    yield "report-huge-int", b'{"schema_version": ' + b"9" * 5000 + b"}"


def logs() -> Iterator[tuple[str, bytes]]:
    yield "log-one-line", b"x" * (LIMIT_BYTES - 2) + b"\n"
    yield "log-escape-sequences", b"\x1b[31m\x1b]0;title\x07\x9b2J\n" * 50_000
    yield (
        "log-nccl-warn",
        b"node:1:1 [0] NCCL WARN Call to connect returned Connection refused\n" * 14_000,
    )
    rng = random.Random(19)
    yield "log-random-bytes", bytes(rng.randrange(256) for _ in range(500_000))
    block = (
        b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        b"Root Cause (first observed failure):\n[0]:\n  time      : 2026-01-01_00:00:00\n"
        b"  rank      : 999999999999999999999999999999 (local_rank: 0)\n  exitcode  : -9\n"
    )
    yield "log-root-cause-blocks", block * 3000
    yield (
        "log-nodelist",
        b"SLURM_JOB_NODELIST=n[0-99999][0-99999]\nSLURM_NNODES=1000000000000\n" * 10_000,
    )
