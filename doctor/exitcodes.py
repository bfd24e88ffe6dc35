"""The documented exit codes, shared by every command."""

OK = 0  # nothing at or above --fail-on
FINDINGS = 1  # findings at or above --fail-on
USAGE = 2  # a usage error, or the doctor itself could not run
