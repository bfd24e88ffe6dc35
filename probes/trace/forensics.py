"""Forensics of a traced run that stopped making progress (or reached its time limit).

The doctor writes forensics/request; each rank's monitor thread answers with the call its
main thread is in and its flight recorder's entries. At the same time the doctor sends each
rank the signal its faulthandler listens on, which dumps every thread's stack from a C
handler: that works even when the rank's main thread holds the GIL in a stuck call.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddp_doctor.facts.collectives import PENDING
from ddp_doctor.facts.trace import Forensics, RankSnapshot
from ddp_doctor.patient.trace.recorder import REQUEST_FILE
from ddp_doctor.patient.watchdog import process_alive
from ddp_doctor.probes.trace.calls import (
    flight_recorder_calls,
    numbered_as_recorded,
    site_of,
    wrapper_call,
)
from ddp_doctor.probes.trace.journals import (
    RankProcess,
    RankReader,
    journals_by_rank,
    read_progress,
)
from ddp_doctor.trace.stacks import main_frames, user_site, waiting_in

SIGNAL_HANDLER_GRACE_S = 0.2  # faulthandler writes from its signal handler; let it finish


def live_ranks(ranks_dir: Path) -> list[RankProcess]:
    """The latest process of every rank, where it still runs."""
    found = []
    for journals in journals_by_rank(ranks_dir).values():
        process = RankProcess.of(journals[-1])
        if alive(process.pid, process.start_time):
            found.append(process)
    return found


def collect_forensics(
    workdir: Path, request: str, reason: str, times: tuple[float, float], wait_s: float
) -> Forensics:
    """Asks every live rank, waits up to `wait_s` for the answers, reads every rank's state;
    `times` is (seconds into the run, seconds without progress)."""
    ranks_dir, forensics_dir = workdir / "ranks", workdir / "forensics"
    temporary = forensics_dir / f"{REQUEST_FILE}.tmp"
    temporary.write_text(request)
    os.replace(temporary, forensics_dir / REQUEST_FILE)
    live = live_ranks(ranks_dir)
    offsets = {r.pid: _size(Path(r.stem + ".stacks")) for r in live}
    for process in live:
        if process.stack_signal is not None and alive(process.pid, process.start_time):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(process.pid, process.stack_signal)
    answers = _answers(forensics_dir, live, request, wait_s)
    pids = {r.pid for r in live}
    snapshots: list[RankSnapshot] = []
    for journals in journals_by_rank(ranks_dir).values():
        reader = RankReader(journals[-1], len(journals) - 1)
        stacks = _read_from(Path(reader.stem + ".stacks"), offsets.get(reader.pid, 0))
        snapshots.append(snapshot(reader, stacks, answers.get(reader.pid), reader.pid in pids))
    after_s, quiet_s = times
    return Forensics(reason, round(after_s, 3), round(quiet_s, 3), tuple(snapshots))


def _answers(
    forensics_dir: Path, live: list[RankProcess], request: str, wait_s: float
) -> dict[int, dict]:
    answers: dict[int, dict] = {}
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for process in live:
            if process.pid in answers:
                continue
            answer = read_progress(forensics_dir / f"rank{process.rank}.{process.pid}.json")
            if answer.get("request") == request:
                answers[process.pid] = answer
        if len(answers) == len(live):
            break
        time.sleep(0.1)
    time.sleep(SIGNAL_HANDLER_GRACE_S)
    return answers


def snapshot(
    reader: RankReader, stacks: str, answer: Mapping[str, Any] | None, alive: bool
) -> RankSnapshot:
    """One rank at forensics time: faulthandler's stack of its main thread, and what its
    monitor thread answered (the wrapped call it is in, the flight recorder's entries)."""

    frames = main_frames(stacks, reader.hello.get("main_thread"))
    frames = tuple(site_of([f.path, f.line, f.function], reader.cwd) or f for f in frames)
    answered = answer is not None
    if answer is None:
        answer = read_progress(Path(reader.stem + ".progress"))  # up to a second old
    raw_pending = answer.get("pending")
    pending = (
        wrapper_call(raw_pending, reader.cwd, PENDING) if isinstance(raw_pending, dict) else None
    )
    waiting = "collective" if pending else waiting_in(frames, reader.not_user) if alive else None
    if waiting == "backward" and not reader.events("ddp"):
        waiting = None  # a plain backward pass computes; only DDP's waits for its peers
    recorded = flight_recorder_calls(answer.get("flight_recorder"), bool(waiting))
    if pending is not None:
        pending = numbered_as_recorded(pending, recorded)
    return RankSnapshot(
        rank=reader.rank,
        answered=answered,
        frames=frames[:40],
        where=user_site(frames, reader.not_user),
        waiting=waiting,
        pending=pending,
        flight_recorder=recorded,
        exited=not alive,
    )


def alive(pid: int, started: object) -> bool:
    """The process runs (a zombie does not) and is the one that started at `started`."""
    return process_alive(pid, str(started) if isinstance(started, int) else "")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
