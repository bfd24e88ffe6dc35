"""Inside a traced rank: its journal, the ring of its last collectives, its progress file, and
the thread that answers the doctor's requests for forensics. Standard library only.

Files, all in the doctor's folder (DDP_DOCTOR_TRACE), named after the rank and the pid so a
restarted rank or a second Python of one rank never writes into another's:
  ranks/rankR.PID.jsonl     one JSON line per event, each written with one os.write
  ranks/rankR.PID.ring      the last KEEP collectives, fixed-size slots rewritten in turn
  ranks/rankR.PID.progress  counters and the pending collective, rewritten every second
  ranks/rankR.PID.stacks    faulthandler's dump of every thread, on the doctor's signal
  forensics/rankR.PID.json  the answer to forensics/request: pending call, flight recorder
Everything a collective wrapper writes is written before the collective runs, so a rank that
hangs or is killed (a SIGABRT from gloo) still leaves it behind.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRACE_VARIABLE = "DDP_DOCTOR_TRACE"
CONFIG_FILE = "config.json"
REQUEST_FILE = "request"
SLOT_BYTES = 1024
TICK_S = 0.25
PROGRESS_EVERY = 4  # ticks: the progress file is rewritten once a second


class TraceBound(SystemExit):
    """Raised where the trace's --steps or --epochs bound is reached: the rank exits with 0,
    running the script's own `finally` blocks on the way out."""

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason


class Recorder:
    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        self.folder = folder
        self.config = config
        self.keep = int(config.get("keep", 32))
        self.rank = _env_int("RANK", 0)
        self.pid = os.getpid()
        stem = folder / "ranks" / f"rank{self.rank}.{self.pid}"
        self.stem = stem
        self._journal = os.open(f"{stem}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._ring = os.open(f"{stem}.ring", os.O_RDWR | os.O_CREAT, 0o600)
        self.stacks_path = Path(f"{stem}.stacks")
        self._lock = threading.Lock()
        self.issued: dict[str, int] = {}  # per process group: the wrappers' sequence numbers
        self.written = 0  # collective records written (journal first, then the ring)
        self.completed = 0
        self.steps = 0
        self.epochs = 0
        self.last_progress = time.time()
        self.pending: dict[str, Any] | None = None  # the collective the main thread is in
        self.flight_recorder: Callable[[bool], list[dict[str, Any]]] | None = None
        self._first_recorded = False
        self._answered: str | None = None
        self._last_token: Any = None

    # -- the journal -----------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        if os.getpid() != self.pid:  # a forked DataLoader worker: not the rank
            return
        record = {"event": kind, "t": round(time.time(), 6), **fields}
        line = json.dumps(record, default=str) + "\n"
        os.write(self._journal, line.encode("utf-8", "replace"))

    def hello(self, **fields: Any) -> None:
        self.event(
            "hello",
            rank=self.rank,
            local_rank=_env_int("LOCAL_RANK", None),
            world_size=_env_int("WORLD_SIZE", None),
            pid=self.pid,
            start_time=process_start_time(self.pid),
            host=socket.gethostname(),
            **fields,
        )

    # -- collectives -----------------------------------------------------------------------
    def next_seq(self, group: str) -> int:
        with self._lock:
            self.issued[group] = self.issued.get(group, 0) + 1
            return self.issued[group]

    def collective_started(self, call: dict[str, Any]) -> None:
        """Written before the call: the first KEEP into the journal, later ones into the ring."""
        with self._lock:
            index = self.written
            self.written += 1
            self.pending = dict(call, since=time.time())
        if index < self.keep:
            self.event("collective", **call)
            return
        slot = (index - self.keep) % self.keep
        data = json.dumps(dict(call, index=index), default=str).encode("utf-8", "replace")
        if len(data) > SLOT_BYTES - 1:
            data = json.dumps({"index": index, "op": call.get("op"), "seq": call.get("seq")})
            data = data.encode()
        os.pwrite(self._ring, data.ljust(SLOT_BYTES - 1) + b"\n", slot * SLOT_BYTES)

    def waiting(self, call: dict[str, Any]) -> None:
        """The main thread waits in something that is not a collective record (init)."""
        with self._lock:
            self.pending = dict(call, since=time.time())

    def collective_done(self) -> None:
        with self._lock:
            self.completed += 1
            self.pending = None
            self.last_progress = time.time()

    def progressed(self) -> None:
        self.last_progress = time.time()

    # -- the monitor thread ----------------------------------------------------------------
    def start_thread(self) -> None:
        thread = threading.Thread(target=self._loop, name="ddp-doctor-trace", daemon=True)
        thread.start()

    def _loop(self) -> None:
        tick = 0
        while True:
            try:
                self._answer_request()
                if tick % PROGRESS_EVERY == 0:
                    self._note_flight_recorder()
                    self.write_progress()
            except Exception as error:  # the monitor must never take the rank down
                self.event(
                    "monitor_error", where="thread", error=f"{type(error).__name__}: {error}"
                )
                time.sleep(1.0)
            tick += 1
            time.sleep(TICK_S)

    def write_progress(self) -> None:
        with self._lock:
            state = {
                "t": time.time(),
                "progress_t": self.last_progress,
                "steps": self.steps,
                "epochs": self.epochs,
                "completed": self.completed,
                "written": self.written,
                "pending": self.pending,
            }
        _replace(Path(f"{self.stem}.progress"), json.dumps(state, default=str))

    def _note_flight_recorder(self) -> None:
        """Flight-recorder entries that change mean collectives are completing (DDP's own
        all-reduces never pass the Python wrappers); the first KEEP go into the journal."""
        if self.flight_recorder is None:
            return
        entries = self.flight_recorder(self._first_recorded)  # then only the active ones
        token = [(e.get("record_id"), e.get("retired")) for e in entries[-8:]]
        if token != self._last_token:
            self._last_token = token
            self.progressed()
        if not self._first_recorded and len(entries) >= self.keep:
            self._first_recorded = True
            self.event("flight_recorder_first", entries=entries[: self.keep])

    def _answer_request(self) -> None:
        request = self.folder / "forensics" / REQUEST_FILE
        try:
            wanted = request.read_text().strip()
        except OSError:
            return
        if not wanted or wanted == self._answered:
            return
        self._answered = wanted
        answer: dict[str, Any] = {"request": wanted, "t": time.time(), "pending": self.pending}
        answer.update(self.flight_recorder_tail())
        target = self.folder / "forensics" / f"rank{self.rank}.{self.pid}.json"
        _replace(target, json.dumps(answer, default=str))

    def flight_recorder_tail(self) -> dict[str, Any]:
        if self.flight_recorder is None:
            return {}
        try:
            return {"flight_recorder": self.flight_recorder(False)[-self.keep :]}
        except Exception as error:
            return {"flight_recorder_error": f"{type(error).__name__}: {error}"}


def _replace(path: Path, text: str) -> None:
    """Writes a whole file the doctor may be reading: to a temporary name, then renamed."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _env_int(name: str, default: int | None) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


def process_start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


FLIGHT_RECORDER_FIELDS = (
    "record_id",
    "collective_seq_id",
    "p2p_seq_id",
    "is_p2p",
    "profiling_name",
    "process_group",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "state",
    "retired",
    "time_created_ns",
)


def flight_recorder_reader(torch: Any) -> Callable[[bool], list[dict[str, Any]]] | None:
    """Reads torch's flight recorder when it is on (TORCH_FR_BUFFER_SIZE > 0), else None."""
    size = os.environ.get("TORCH_FR_BUFFER_SIZE") or os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
    if not (size or "").strip().isdigit() or int(size or 0) <= 0:
        return None
    c10d = torch._C._distributed_c10d
    names = ("_dump_fr_trace_json", "_dump_nccl_trace_json")
    dumps = [getattr(c10d, name) for name in names if hasattr(c10d, name)]

    def read(only_active: bool) -> list[dict[str, Any]]:
        for dump in dumps:
            raw = dump(includeCollectives=True, onlyActive=only_active)
            entries = json.loads(raw).get("entries") or []
            if entries:
                return [{k: e.get(k) for k in FLIGHT_RECORDER_FIELDS} for e in entries]
        return []

    return read if dumps else None
