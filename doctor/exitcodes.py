"""The documented exit codes, shared by every command."""

import signal

OK = 0  # nothing at or above --fail-on
FINDINGS = 1  # findings at or above --fail-on
USAGE = 2  # a usage error, or the doctor itself could not run
# Stopped by a signal: 128 + its number, as shells report it: SIGHUP 129, SIGINT 130,
# SIGQUIT 131, SIGTERM 143.
STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM")
    if hasattr(signal, name)
)
# Findings that mean the doctor itself could not run: the report exits USAGE.
COULD_NOT_RUN = frozenset({"DDP905"})


def stopped_by(signum: int) -> int:
    return 128 + signum
