"""Faults the test suite injects into a rank, to prove each failure is named.

Not shipped: the test suite copies this module into the job's payload
(`JobConfig.extra_modules`) and names the fault with `JobConfig.test_fault`, so no user can
trigger one. Spec: "RANK:STAGE:ACTION", ACTION one of crash (raise),
exit (exit code 7), kill (SIGKILL itself), stall (sleep until killed), corrupt (add 1 to its
all-reduce contribution; only at stage allreduce), or torch=VERSION (the rank reports that
torch version at stage identity, as a node with another torch would).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

ACTIONS = ("crash", "exit", "kill", "stall", "corrupt", "torch")
QUIET_ACTIONS = ("corrupt", "torch")  # change what the rank reports, never stop it


@dataclass(frozen=True)
class Fault:
    rank: int
    stage: str
    action: str
    value: str | None = None

    def applies(self, rank: int, stage: str) -> bool:
        return self.rank == rank and self.stage == stage and self.action not in QUIET_ACTIONS

    def rewrite_identity(self, rank: int, identity: dict[str, Any]) -> dict[str, Any]:
        if self.rank == rank and self.action == "torch":
            return {**identity, "torch_version": self.value}
        return identity

    def corrupts(self, rank: int, stage: str) -> bool:
        return self.rank == rank and self.stage == stage and self.action == "corrupt"

    def strike_before(self) -> None:
        if self.action == "crash":
            raise RuntimeError(f"ddp-doctor test fault: rank {self.rank} crashes at {self.stage}")
        if self.action == "exit":
            os._exit(7)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "stall":
            while True:
                time.sleep(60)


def parse_fault(spec: str | None) -> Fault | None:
    if not spec:
        return None
    rank, stage, action = spec.split(":")
    action, _, value = action.partition("=")
    if action not in ACTIONS:
        raise ValueError(f"unknown test fault action {action!r}")
    return Fault(int(rank), stage, action, value or None)
