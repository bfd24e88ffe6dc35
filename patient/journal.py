"""A rank's journal: one JSON line per stage event, written and flushed as it happens."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def note(self, event: str, **fields: Any) -> None:
        """A record that is not a stage (e.g. "placement": where torchrun put this rank)."""
        self._write({"event": event, **fields})

    def start(self, stage: str) -> None:
        self._write({"event": "start", "stage": stage, "time": time.time()})

    def end(
        self,
        stage: str,
        ok: bool,
        seconds: float,
        error: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        record = {"event": "end", "stage": stage, "ok": ok, "seconds": round(seconds, 6)}
        if error is not None:
            record["error"] = error[:2000]
        if data:
            record["data"] = data
        self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        # One os.write per line: the line is in the file even if the rank is killed next.
        os.write(self._fd, (json.dumps(record, default=str) + "\n").encode())


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete line; a line cut short by a kill is dropped."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
