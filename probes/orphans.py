"""Processes the user's job left behind: a rank's `setsid` grandchild, a daemonised data
server. Where Linux allows, the doctor makes itself their child subreaper, so an orphan below it
is re-parented to the doctor instead of init and can be found and ended when the job is; where
it does not, the process-group sweep and the tree remembered while the job ran stay the only
net (probes/runner.py, probes/trace/launch.py)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable

from ddp_doctor.probes.runner import _prctl, descendants

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h, Linux 3.4+


def adopt_orphans() -> bool:
    """Makes this process the subreaper of everything it starts; False where it cannot."""
    prctl = _prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def end_orphans(keep: Iterable[int] = ()) -> list[int]:
    """SIGKILLs every process below the doctor except `keep` and what runs below those, and
    reaps the ones re-parented to it; returns the pids it ended."""
    kept = set(keep)
    for pid in list(kept):
        kept.update(descendants(pid))
    ended = [pid for pid in descendants(os.getpid()) if pid not in kept]
    for pid in ended:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in ended:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)  # ours since re-parenting: reaped, no zombie left
    return ended
