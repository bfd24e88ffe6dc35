"""torchrun's failure summary: which rank failed first, how, and which others failed too.

torch >= 1.11 (the launcher's ChildFailedError):

    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ============================================================
    train.py FAILED
    ------------------------------------------------------------
    Failures:
    [1]:
      time      : 2024-06-16_20:34:34
      host      : node-1
      rank      : 2 (local_rank: 2)
      exitcode  : -15 (pid: 76628)
      error_file: <N/A>
      traceback : Signal 15 (SIGTERM) received by PID 76628
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...the same fields...
    ============================================================

torch 1.9 - 1.10 put "Root Cause:" first, then "Other Failures:", fields without padding
("rank: 0 (local_rank: 0)", "msg: ..."), and closed with a line of asterisks. A proposed change
(pytorch/pytorch#175254) appends the signal's name to the exitcode ("-11 (pid: 5277)
(SIGSEGV)"); the parser reads that too.

Summaries retyped by hand into an issue are read leniently: headers and signal names in any
case ("signal 9 (sigkill)"), entries without the colon ("[0]"), and fields run together on
one line ("rank: 0 (local_rank: 0)exitcode: -9 (pid: 7)").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_BLOCK_LINES = 5000  # a runaway guard: 64 ranks x 8 lines is ~500
MAX_LINES_BEFORE_HEADER = 200  # "ChildFailedError" mentioned without a summary after it

_SEPARATOR = re.compile(r"^\s*(?:={10,}|-{10,}|\*{10,})\s*$")
_ROOT_HEADER = re.compile(r"^\s*Root Cause(?: ?\(first observed failure\))?\s*:?\s*$", re.I)
_OTHERS_HEADER = re.compile(r"^\s*(?:Other )?Failures\s*:?\s*$", re.I)
_ENTRY = re.compile(r"^\s*\[\d+\]\s*:?\s*$")
_FIELD_NAME = re.compile(
    r"(?<![\w])(time|host|rank|exitcode|error_file|traceback|msg)\s*:\s*", re.I
)
_FIELD_START = re.compile(r"^\s*(?:time|host|rank|exitcode|error_file|traceback|msg)\s*:", re.I)
_RANK = re.compile(r"^(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?", re.I)
_EXITCODE = re.compile(r"^(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", re.I)
_SIGNAL = re.compile(
    r"\b(SIG(?:KILL|TERM|ABRT|SEGV|BUS|HUP|INT|ILL|FPE|PIPE|QUIT|ALRM|TRAP|SYS|XCPU|USR[12]))\b",
    re.I,
)


@dataclass
class RankFailure:
    section: str  # "root" or "other"
    facts: dict[str, object] = field(default_factory=dict)


@dataclass
class TorchrunFailureBlock:
    """Fed the lines after a ChildFailedError (or a bare "Root Cause" header), one by one."""

    start_line: int
    task: int | None  # the SLURM task whose lines belong to this block
    failures: list[RankFailure] = field(default_factory=list)
    section: str | None = None
    lines_seen: int = 0
    done: bool = False
    root_line: int | None = None  # where the root cause's entry starts
    root_text: str = ""  # its rank and exitcode lines, the finding's evidence text
    _closing: bool = False

    def accepts(self, task: int | None) -> bool:
        return not self.done and (self.task is None or task == self.task)

    def feed(self, body: str, number: int) -> None:
        self.lines_seen += 1
        if self.lines_seen > MAX_BLOCK_LINES or (
            self.section is None and self.lines_seen > MAX_LINES_BEFORE_HEADER
        ):
            self.done = True
            return
        if _ROOT_HEADER.match(body) or _OTHERS_HEADER.match(body):
            self.section = "root" if _ROOT_HEADER.match(body) else "other"
            self._closing = False
            return
        if _SEPARATOR.match(body):
            # torch >= 1.11 ends after the root section; 1.9 - 1.10 after the others section
            self._closing = self.root is not None
            if body.strip().startswith("*") and self.section is not None:
                self.done = True
            return
        if self._closing and body.strip():
            self.done = True
            return
        if self.section is None:
            return
        if _ENTRY.match(body):
            self.failures.append(RankFailure(self.section))
            if self.section == "root" and self.root_line is None:
                self.root_line = number
            return
        if not _FIELD_START.match(body):
            return
        if not self.failures or self.failures[-1].section != self.section:
            if self.section != "root":
                return
            self.failures.append(RankFailure(self.section))  # a retyped root without "[0]:"
            self.root_line = number if self.root_line is None else self.root_line
        for key, value in _fields(body):
            _record(self.failures[-1].facts, key, value)
            if self.section == "root" and _worth_showing(key, value):
                self._add_root_text(f"{key}: {value}")

    def _add_root_text(self, part: str) -> None:
        if self.root is not None and self.failures.index(self.root) == len(self.failures) - 1:
            joined = f"{self.root_text}; {part}" if self.root_text else part
            self.root_text = joined[:300]

    @property
    def root(self) -> RankFailure | None:
        return next((f for f in self.failures if f.section == "root" and f.facts), None)

    def others(self) -> list[dict[str, object]]:
        return [f.facts for f in self.failures if f.section == "other" and f.facts]


def _fields(body: str) -> list[tuple[str, str]]:
    """Every `name: value` of a line; usually one, several when they were run together."""
    starts = list(_FIELD_NAME.finditer(body))
    if len(starts) > 1 and starts[0].group(1).lower() == "traceback":
        starts = starts[:1]  # a traceback's text may say "rank: ..." itself
    fields = []
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(body)
        fields.append((start.group(1).lower(), body[start.end() : end].strip()))
    return fields


def _worth_showing(key: str, value: str) -> bool:
    return key in ("rank", "exitcode") or (key == "traceback" and "To enable" not in value)


def _record(facts: dict[str, object], key: str, value: str) -> None:
    if key == "rank":
        found = _RANK.match(value)
        if found:
            facts["rank"] = int(found.group(1))
            if found.group(2) is not None:
                facts["local_rank"] = int(found.group(2))
    elif key == "exitcode":
        found = _EXITCODE.match(value)
        if found:
            facts["exitcode"] = int(found.group(1))
            if found.group(2) is not None:
                facts["pid"] = int(found.group(2))
        _record_signal(facts, value)
    elif key == "traceback" or key == "msg":  # msg: torch 1.9 - 1.10
        _record_signal(facts, value)
        if key == "traceback" and not value.startswith("To enable traceback"):
            facts["traceback"] = value
    elif key == "error_file":
        if value and value != "<N/A>":
            facts["error_file"] = value
    else:  # time, host
        facts[key] = value


def _record_signal(facts: dict[str, object], value: str) -> None:
    signal = _SIGNAL.search(value)
    if signal and "signal" not in facts:
        facts["signal"] = signal.group(1).upper()
