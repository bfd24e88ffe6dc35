"""How a probe says it could not measure, without knowing anything about findings."""

from __future__ import annotations

from typing import Any


class ProbeSkipped(Exception):
    """The probe does not apply here (no driver, no GPU); the reason goes into the report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ProbeFailed(Exception):
    """The probe ran but could not measure; `facts` keeps whatever it did measure."""

    def __init__(self, reason: str, facts: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.facts = facts


class ProbeTimedOut(Exception):
    """What the probe waited for (a child process, a query) did not answer within its limit."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
