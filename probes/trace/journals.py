"""The traced ranks' files read back into facts: journals, rings, progress and forensics.

Runs in the doctor. Lines cut short by a kill, unknown events and odd values are skipped: a
journal is evidence, read as far as it goes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_doctor.facts.trace import (
    DataParallelRecord,
    DdpRecord,
    DeviceRecord,
    InitRecord,
    LoaderRecord,
    LoadRecord,
    RankException,
    RankTrace,
    SamplerRecord,
    SaveRecord,
    Site,
    SyncBatchNormRecord,
)
from ddp_doctor.patient.journal import read_journal
from ddp_doctor.probes.trace.calls import flight_recorder_calls, site_of, wrapper_call
from ddp_doctor.trace.stacks import user_site


def journals_by_rank(folder: Path) -> dict[int, list[Path]]:
    """rank -> its processes' journals, oldest first (several after torchrun restarts)."""
    found: dict[int, list[tuple[float, Path]]] = {}
    for path in folder.glob("rank*.jsonl"):
        rank_text = path.name.split(".")[0].removeprefix("rank")
        if not rank_text.isdigit():
            continue
        hello = first_record(path)
        found.setdefault(int(rank_text), []).append((float(hello.get("t") or 0), path))
    return {rank: [p for _, p in sorted(paths)] for rank, paths in sorted(found.items())}


def first_record(path: Path) -> dict[str, Any]:
    """The journal's first line (the monitor's hello), without reading the rest."""
    try:
        with path.open("rb") as handle:
            record = json.loads(handle.readline().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


@dataclass(frozen=True)
class RankProcess:
    """A rank's process as its hello names it: enough to watch it, signal it, find its files."""

    rank: int
    pid: int
    start_time: int | None
    stem: str  # its files' path without the suffix
    stack_signal: int | None

    @classmethod
    def of(cls, journal: Path) -> RankProcess:
        hello = first_record(journal)
        start, signum = hello.get("start_time"), hello.get("stack_signal")
        return cls(
            rank=int(hello.get("rank") or 0),
            pid=int(hello.get("pid") or 0),
            start_time=start if isinstance(start, int) else None,
            stem=str(journal)[: -len(".jsonl")],
            stack_signal=signum if isinstance(signum, int) else None,
        )


def read_progress(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_ring(path: Path) -> list[dict[str, Any]]:
    """The ring's records in the order they were written."""
    try:
        lines = path.read_bytes().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("index"), int):
            records.append(record)
    return sorted(records, key=lambda r: r["index"])


def _device_index(value: Any) -> int | None:
    """'1', 'cuda:1' or 'cuda' (None) -> 1, as DDP reads a device it is given."""
    text = str(value) if value is not None else ""
    tail = text.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def _device_indices(values: Any) -> list[int] | None:
    if not isinstance(values, list):
        return None
    indices = [_device_index(v) for v in values]
    return [i for i in indices if i is not None]


class RankReader:
    """One rank's process: its journal's events folded into a RankTrace."""

    def __init__(self, journal: Path, restarts: int) -> None:
        self.stem = str(journal)[: -len(".jsonl")]
        self.records = read_journal(journal)
        self.restarts = restarts
        hello = next((r for r in self.records if r.get("event") == "hello"), {})
        self.hello = hello
        self.cwd = hello.get("cwd")
        self.not_user: dict[str, list[str]] = {}
        for record in self.records:
            if record.get("event") == "torch" and isinstance(record.get("not_user"), dict):
                self.not_user = record["not_user"]

    @property
    def rank(self) -> int:
        return int(self.hello.get("rank") or 0)

    @property
    def pid(self) -> int:
        return int(self.hello.get("pid") or 0)

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == kind]

    def last(self, kind: str) -> dict[str, Any] | None:
        found = self.events(kind)
        return found[-1] if found else None

    def site(self, record: Mapping[str, Any] | None) -> Site | None:
        return site_of(record.get("site"), self.cwd) if record else None

    def trace(self, exit_code: int | None, stopped: bool) -> RankTrace:
        progress = read_progress(Path(self.stem + ".progress"))
        final = self.last("exit_state") or {}
        torch = self.last("torch") or {}
        end, detail = self._end(stopped, bool(final))
        return RankTrace(
            rank=self.rank,
            pid=self.pid,
            host=str(self.hello.get("host") or ""),
            local_rank=self.hello.get("local_rank"),
            world_size=self.hello.get("world_size"),
            started=float(self.hello.get("t") or 0.0),
            torch_version=torch.get("version"),
            cuda_build=torch.get("cuda_build"),
            end=end,
            end_detail=detail,
            exit_code=exit_code,
            exception=self._exception(),
            steps=int(max(final.get("steps") or 0, progress.get("steps") or 0)),
            epochs=int(max(final.get("epochs") or 0, progress.get("epochs") or 0)),
            collectives=self._collective_count(final, progress),
            init=self._init(),
            set_devices=tuple(self._set_devices()),
            ddp=tuple(self._ddp()),
            dataparallel=tuple(self._dataparallel()),
            samplers=tuple(self._samplers()),
            loaders=tuple(self._loaders()),
            saves=tuple(
                SaveRecord(str(r.get("target")), bool(r.get("is_path")), self.site(r))
                for r in self.events("save")
            ),
            loads=tuple(self._loads()),
            syncbn=tuple(
                SyncBatchNormRecord(bool(r.get("on_ddp")), self.site(r))
                for r in self.events("syncbn")
            ),
            collectives_first=tuple(wrapper_call(r, self.cwd) for r in self.events("collective")),
            collectives_last=tuple(wrapper_call(r, self.cwd) for r in self.ring()),
            flight_recorder_first=flight_recorder_calls(
                (self.last("flight_recorder_first") or {}).get("entries")
            ),
            flight_recorder_last=flight_recorder_calls(final.get("flight_recorder")),
            monitor_errors=tuple(
                f"{r.get('where')}: {r.get('error')}" for r in self.events("monitor_error")
            ),
            restarts=self.restarts,
        )

    def _collective_count(self, final: Mapping[str, Any], progress: Mapping[str, Any]) -> int:
        """The wrappers' count, or the flight recorder's (it also sees DDP's own)."""
        written = max(int(final.get("written") or 0), int(progress.get("written") or 0))
        wrapped = max(written, len(self.events("collective")))
        entries = flight_recorder_calls(final.get("flight_recorder"))
        entries += flight_recorder_calls((self.last("flight_recorder_first") or {}).get("entries"))
        last_seq: dict[str, int] = {}
        for call in entries:
            last_seq[call.group] = max(last_seq.get(call.group, 0), call.seq)
        return max(wrapped, sum(last_seq.values()))

    def ring(self) -> list[dict[str, Any]]:
        return read_ring(Path(self.stem + ".ring"))

    def _end(self, stopped: bool, exited_normally: bool) -> tuple[str, str | None]:
        end = self.last("end")
        if end is not None:
            how = str(end.get("how"))
            detail = end.get("reason") if how == "bound" else end.get("code")
            return how, None if detail is None else str(detail)
        bound = self.last("bound")
        if bound is not None:
            return "bound", str(bound.get("reason"))
        if self.events("exception"):
            return "exception", None
        if exited_normally:
            return "returned", None
        return ("stopped" if stopped else "unknown"), None

    def _exception(self) -> RankException | None:
        record = self.last("exception")
        if record is None:
            return None
        frames = tuple(
            site for site in (site_of(f, self.cwd) for f in record.get("frames") or []) if site
        )
        return RankException(
            type=str(record.get("type")),
            message=str(record.get("message") or ""),
            site=user_site(reversed(frames), self.not_user),
            frames=frames,
        )

    def _init(self) -> InitRecord | None:
        record = self.last("init")
        if record is None:
            return None
        fields = ("backend", "world_size", "rank", "timeout_s", "init_method", "seconds", "error")
        return InitRecord(
            ok=bool(record.get("ok")),
            rank_given=bool(record.get("rank_given")),
            current_device=record.get("current_device"),
            uuid=record.get("uuid"),
            site=self.site(record),
            **{name: record.get(name) for name in fields},
        )

    def _set_devices(self) -> Iterable[DeviceRecord]:
        for r in self.events("set_device"):
            yield DeviceRecord(
                str(r.get("device")), r.get("current_device"), r.get("uuid"), self.site(r)
            )

    def _ddp(self) -> Iterable[DdpRecord]:
        """DDP as constructed ("ddp", written before the constructor ran), with DDP's own
        normalised device_ids where the constructor succeeded ("ddp_ready")."""
        ready = {r.get("ddp"): r for r in self.events("ddp_ready")}
        backward = {r.get("ddp"): r for r in self.events("ddp_backward")}
        for r in self.events("ddp"):
            done = ready.get(r.get("ddp"))
            seen = backward.get(r.get("ddp"))
            ids = done.get("device_ids") if done else _device_indices(r.get("device_ids"))
            output = done.get("output_device") if done else _device_index(r.get("output_device"))
            yield DdpRecord(
                ident=int(r.get("ddp") or 0),
                device_ids=tuple(ids) if isinstance(ids, list) else None,
                output_device=output if isinstance(output, int) else None,
                module_device=r.get("module_device"),
                current_device=r.get("current_device"),
                uuid=r.get("uuid"),
                find_unused_parameters=bool(r.get("find_unused_parameters")),
                static_graph=bool((done or r).get("static_graph")),
                parameters=int(r.get("parameters") or 0),
                constructed=done is not None,
                unused=tuple(seen.get("unused") or ()) if seen else None,
                unused_count=int(seen.get("unused_count") or 0) if seen else 0,
                site=self.site(r),
            )

    def _dataparallel(self) -> Iterable[DataParallelRecord]:
        outputs = {r.get("dp"): r.get("devices") or [] for r in self.events("dataparallel_output")}
        for r in self.events("dataparallel"):
            yield DataParallelRecord(
                ident=int(r.get("dp") or 0),
                device_ids=tuple(r.get("device_ids") or ()),
                output_device=r.get("output_device"),
                module_device=r.get("module_device"),
                output_devices=tuple(outputs.get(r.get("dp"), ())),
                site=self.site(r),
            )

    def _samplers(self) -> Iterable[SamplerRecord]:
        epochs: dict[Any, list[Any]] = {}
        for r in self.events("sampler_iter"):
            epochs.setdefault(r.get("sampler"), []).append(r.get("epoch"))
        for r in self.events("sampler"):
            yield SamplerRecord(
                ident=int(r.get("sampler") or 0),
                shuffle=bool(r.get("shuffle")),
                num_replicas=r.get("num_replicas"),
                rank=r.get("rank"),
                drop_last=bool(r.get("drop_last")),
                dataset_size=r.get("dataset_size"),
                epochs=tuple(epochs.get(r.get("sampler"), ())),
                site=self.site(r),
            )

    def _loaders(self) -> Iterable[LoaderRecord]:
        iterations: dict[Any, int] = {}
        for r in self.events("loader_iter"):
            iterations[r.get("loader")] = max(
                iterations.get(r.get("loader"), 0), r.get("iteration") or 0
            )
        trained = {r.get("loader") for r in self.events("loader_steps")}
        for r in self.events("loader"):
            yield LoaderRecord(
                ident=int(r.get("loader") or 0),
                sampler_kind=str(r.get("sampler_kind")),
                sampler=r.get("sampler"),
                dataset_size=r.get("dataset_size"),
                batch_size=r.get("batch_size"),
                num_workers=r.get("num_workers"),
                iterations=iterations.get(r.get("loader"), 0),
                trained=r.get("loader") in trained,
                site=self.site(r),
            )

    def _loads(self) -> Iterable[LoadRecord]:
        for r in self.events("load"):
            yield LoadRecord(
                target=str(r.get("target")),
                map_location=r.get("map_location"),
                devices=tuple(r.get("devices") or ()),
                current_device=r.get("current_device"),
                site=self.site(r),
            )
