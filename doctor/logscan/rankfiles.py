"""Which rank wrote a file of a folder of per-rank logs, from its path.

- torchrun --log-dir (and --redirects/--tee): <log_dir>/<run_id>/attempt_<n>/<local_rank>/
  stdout.log, stderr.log: the folder above the file is the local rank;
- a name that says so: rank3.log, rank_3.txt, log.rank-12;
- srun -o / -e with %t (the task id): out.0, train_1234_3.log ...: a trailing number counts
  only where at least two files of one folder differ by it alone and the numbers start at 0
  or 1 (slurm-<jobid>.out names jobs, not tasks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

_ATTEMPT = re.compile(r"attempt_\d+")
_TORCHRUN_FILES = ("stdout.log", "stderr.log", "error.json")
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?(\d{1,6})(?!\d)", re.I)
_TRAILING = re.compile(r"^(.*?)(\d{1,5})(\D*)$")
MAX_TASK = 4096


def speakers(paths: Iterable[Path]) -> dict[Path, dict[str, int]]:
    """For each per-rank file: {"local_rank": n}, {"rank": n} or {"task": n}."""
    found: dict[Path, dict[str, int]] = {}
    groups: dict[tuple[Path, str, str], list[tuple[Path, int]]] = {}
    for path in paths:
        speaker = _torchrun_local_rank(path) or _named_rank(path)
        if speaker:
            found[path] = speaker
            continue
        trailing = _TRAILING.match(path.name)
        if trailing:
            key = (path.parent, trailing.group(1), trailing.group(3))
            groups.setdefault(key, []).append((path, int(trailing.group(2))))
    for members in groups.values():
        numbers = [number for _, number in members]
        if len(members) > 1 and min(numbers) in (0, 1) and max(numbers) < MAX_TASK:
            found.update({path: {"task": number} for path, number in members})
    return found


def _torchrun_local_rank(path: Path) -> dict[str, int] | None:
    parent = path.parent
    if (
        path.name in _TORCHRUN_FILES
        and parent.name.isdigit()
        and _ATTEMPT.fullmatch(parent.parent.name)
    ):
        return {"local_rank": int(parent.name)}
    return None


def _named_rank(path: Path) -> dict[str, int] | None:
    match = _RANK_NAME.search(path.name)
    return {"rank": int(match.group(1))} if match else None
