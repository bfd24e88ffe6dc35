"""One raw log line made readable: decoded, colour codes out, and who printed it."""

from __future__ import annotations

import re
from dataclasses import dataclass

EVIDENCE_CHARS = 300  # the longest line text a finding keeps as evidence

# ANSI escape sequences: colours (ESC [ ... m), cursor moves, and OSC titles (ESC ] ... BEL).
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

# Who printed a line, from the prefixes launchers put in front of it, outermost first:
#   "3: "          srun --label: the SLURM task (a node's torchrun, or a rank when srun starts
#                  the ranks itself; which one is not knowable from the line)
#   "node-7: "     pdsh / deepspeed's multi-node runner (and `parallel --tag`): the host
#   "[1,3]<stdout>:"  mpirun --tag-output (deepspeed's OpenMPI runner): [job,rank]
#   "(RayTrainWorker pid=81, ip=10.0.0.5) "  Ray's worker prefix: the worker, by ip or pid
#   "[default2]:"  torchrun --tee / --redirects (torch 1.9 - 2.1): the local rank
#   "[rank5]:"     torch >= 2.2 prefixes every rank's output with its global rank
_HOST = (
    r"(?:(?:\d{1,3}\.){3}\d{1,3}"
    r"|(?!rank|epoch|step|iter|loss|cuda)[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z][a-z0-9-]*)*)"
)
_PREFIX = re.compile(
    r"^\s*(?:(?P<task>\d{1,5}): |(?P<host>" + _HOST + r"): )?"
    r"(?:\[\d{1,6},(?P<mpi_rank>\d{1,6})\]<std(?:out|err)>:\s?)?"
    r"(?:\((?:\w+ )?pid=(?P<ray_pid>\d{1,9})(?:, ip=(?P<ray_ip>[\d.]+))?\)\s+)?"
    r"(?:\[default(?P<local_rank>\d{1,5})\]:)?"
    r"(?:\s*\[rank(?P<rank>\d{1,6})\]:)?"
)


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based
    text: str  # decoded, ANSI codes and line ending removed, launcher prefixes kept
    body: str  # the text after the launcher prefixes
    task: int | None = None
    local_rank: int | None = None
    rank: int | None = None
    indent: int = 0  # leading spaces of the line as its program printed it (a traceback frame: 2+)
    worker: str | None = None  # a host (pdsh prefix) or a Ray worker ("pid=81, ip=10.0.0.5")

    def speaker(self) -> dict[str, int | str]:
        """The prefix facts as evidence: only those the line has."""
        facts = {
            "task": self.task,
            "worker": self.worker,
            "local_rank": self.local_rank,
            "rank": self.rank,
        }
        return {key: value for key, value in facts.items() if value is not None}

    def who(self) -> str | None:
        """The speaker in words ("rank 3", "task 1 local rank 2", "node-7"), None if unknown."""
        if self.rank is not None:
            return f"rank {self.rank}"
        parts = [
            f"task {self.task}" if self.task is not None else None,
            self.worker,
            f"local rank {self.local_rank}" if self.local_rank is not None else None,
        ]
        named = [part for part in parts if part]
        return " ".join(named) if named else None

    @property
    def labelled(self) -> bool:
        return self.who() is not None


def read_line(raw: bytes, number: int) -> LogLine:
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    prefix = _PREFIX.match(text)
    assert prefix is not None  # every part of the prefix regex is optional
    body = text[prefix.end() :]
    rank = _int_or_none(prefix.group("rank") or prefix.group("mpi_rank"))
    worker = _worker(prefix)
    labelled = prefix.group("task") or prefix.group("local_rank") or worker
    spaces = len(body) - len(body.lstrip(" ")) if labelled or rank is not None else prefix.end()
    return LogLine(
        number=number,
        text=text,
        body=body,
        task=_int_or_none(prefix.group("task")),
        local_rank=_int_or_none(prefix.group("local_rank")),
        rank=rank,
        indent=max(0, spaces - 1) if prefix.group("rank") is not None else spaces,
        worker=worker,
    )


def _worker(prefix: re.Match[str]) -> str | None:
    if prefix.group("host"):
        return prefix.group("host")
    if prefix.group("ray_ip"):
        return f"pid={prefix.group('ray_pid')}, ip={prefix.group('ray_ip')}"
    return f"pid={prefix.group('ray_pid')}" if prefix.group("ray_pid") else None


def evidence_text(text: str, anchor_at: int) -> str:
    """The part of a line worth showing: the redrawn segment (after a progress bar's last
    carriage return) that holds the match, cut to EVIDENCE_CHARS around it."""
    start = text.rfind("\r", 0, anchor_at) + 1
    end = text.find("\r", anchor_at)
    segment = text[start : end if end >= 0 else len(text)].strip()
    if len(segment) <= EVIDENCE_CHARS:
        return segment
    offset = max(0, min(anchor_at - start - EVIDENCE_CHARS // 3, len(segment) - EVIDENCE_CHARS))
    cut = segment[offset : offset + EVIDENCE_CHARS]
    return (
        ("..." if offset else "") + cut + ("..." if offset + EVIDENCE_CHARS < len(segment) else "")
    )


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value is not None else None
