"""The job's own flight recorder, read without changing the job: the dumps it already wrote
(TORCH_FR_DUMP_TEMP_FILE, formerly TORCH_NCCL_DEBUG_INFO_TEMP_FILE, + the rank), and a dump
asked for through the pipe the job itself enabled.

ProcessGroupNCCL (pytorch/pytorch, ProcessGroupNCCL.cpp, DumpPipe) makes the FIFO
`${TORCH_NCCL_DEBUG_INFO_PIPE_FILE}${rank}.pipe` when that variable and a trace buffer size
(TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE) are set, reads it without blocking, and
dumps its flight recorder to the dump file when anything is written there. Paths are read
through /proc/PID/root, so a rank in a container is read in its own file system."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.facts.collectives import CollectiveCall
from ddp_doctor.flightrec.dumps import DumpError, read_dump

DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"  # torch's default TORCH_FR_DUMP_TEMP_FILE
KEEP_ENTRIES = 64  # the last entries of each rank kept in the facts
DUMP_WAIT_S = 5.0
FRESH = "dump requested through the job's pipe"


@dataclass(frozen=True)
class RankRecorder:
    pid: int
    rank: int
    env: Mapping[str, str]

    def in_root(self, path: str) -> Path:
        return Path(f"/proc/{self.pid}/root{path}") if path.startswith("/") else Path(path)

    @property
    def dump_prefix(self) -> str | None:
        prefix = self.env.get("TORCH_FR_DUMP_TEMP_FILE") or self.env.get(
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
        )
        if prefix:
            return prefix
        return DEFAULT_DUMP_PREFIX if self.buffer_size > 0 else None

    @property
    def buffer_size(self) -> int:
        text = self.env.get("TORCH_FR_BUFFER_SIZE") or self.env.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
        return int(text) if text and text.strip().isdigit() else 0

    @property
    def pipe(self) -> Path | None:
        stem = self.env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
        if not stem or self.buffer_size <= 0:
            return None
        return self.in_root(f"{stem}{self.rank}.pipe")

    @property
    def dump(self) -> Path | None:
        prefix = self.dump_prefix
        return self.in_root(f"{prefix}{self.rank}") if prefix else None


def request_dump(recorder: RankRecorder) -> str:
    """Writes one byte into the rank's own dump pipe; says what happened."""
    pipe = recorder.pipe
    if pipe is None:
        return "no pipe"
    try:
        if not stat.S_ISFIFO(os.lstat(pipe).st_mode):
            return f"{pipe.name} is not a FIFO, not written"
        descriptor = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as error:
        if error.errno == errno.ENXIO:
            return "the rank does not read its pipe"
        return f"pipe not usable: {error.strerror or error}"
    try:
        os.write(descriptor, b"1")
    except OSError as error:
        return f"pipe not writable: {error.strerror or error}"
    finally:
        os.close(descriptor)
    return "requested"


def collect(
    recorders: Sequence[RankRecorder], timeout_s: float
) -> dict[int, tuple[tuple[CollectiveCall, ...], str]]:
    """pid -> (its last entries, where they came from or why there are none)."""
    before = {r.pid: _mtime(r.dump) for r in recorders}
    asked = {r.pid: request_dump(r) for r in recorders}
    wanted = [r for r in recorders if asked[r.pid] == "requested"]
    deadline = time.monotonic() + min(DUMP_WAIT_S, timeout_s)
    while wanted and time.monotonic() < deadline:
        if all(_mtime(r.dump) != before[r.pid] for r in wanted):
            break
        time.sleep(0.1)
    found = {}
    for recorder in recorders:
        fresh = asked[recorder.pid] == "requested" and _mtime(recorder.dump) != before[recorder.pid]
        found[recorder.pid] = _read(recorder, fresh, asked[recorder.pid])
    return found


def _read(
    recorder: RankRecorder, fresh: bool, asked: str
) -> tuple[tuple[CollectiveCall, ...], str]:
    path = recorder.dump
    if path is None:
        return (), "not enabled (no TORCH_FR_BUFFER_SIZE or dump file set)"
    if _mtime(path) is None:
        return (), f"no dump at {path.name} ({asked})"
    try:
        dump = read_dump(path)
    except DumpError as error:
        return (), f"dump unreadable: {error}"
    # entries come read by the one flight-recorder entry parser
    calls = tuple(call for call in dump.entries[-KEEP_ENTRIES:] if not call.point_to_point)
    origin = FRESH if fresh else "dump the job had written"
    return calls, origin


def _mtime(path: Path | None) -> int | None:
    if path is None:
        return None
    with contextlib.suppress(OSError):
        return os.stat(path).st_mtime_ns
    return None
