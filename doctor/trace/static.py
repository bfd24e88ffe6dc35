"""What the trace's rules need from `check`, collected while the trace runs: the static
collective-under-rank-guard analysis (DDP120) of each of the user's files that the forensics
name (where the ranks stood, the calls they waited in). The rules then read only these facts."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.trace import RankGuardCheck, TraceFacts
from ddp_doctor.registry import spec_for
from ddp_doctor.script.analyze import analyze
from ddp_doctor.script.files import PYTHON, Candidate, Unreadable, read_text

MAX_FILES = 16  # a hang names a few files; a bound keeps a deep stack from costing more


def rank_guard_checks(trace: TraceFacts) -> tuple[RankGuardCheck, ...]:
    paths = list(dict.fromkeys(_user_files(trace)))[:MAX_FILES]
    return tuple(_check(path) for path in paths)


def _user_files(trace: TraceFacts) -> Iterator[str]:
    if trace.forensics is None:
        return
    for snapshot in trace.forensics.ranks:
        wheres = [snapshot.pending.where if snapshot.pending else None]
        wheres.append(str(snapshot.where) if snapshot.where else None)
        for where in wheres:
            path = where.rpartition(":")[0] if where else ""
            if path.endswith(".py"):
                yield path


def _check(path: str) -> RankGuardCheck:
    text = read_text(Candidate(path, PYTHON))
    if isinstance(text, Unreadable):
        return RankGuardCheck(path, error=text.reason)
    found = analyze(path, text, PYTHON, [spec_for("DDP120")])
    lines = sorted({f.location.line for f in found if f.code == "DDP120" and f.location})
    unreadable = next((f.message for f in found if f.code != "DDP120"), None)
    return RankGuardCheck(path, tuple(line for line in lines if line), unreadable)
