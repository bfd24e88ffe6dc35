"""SLURM's node list as SLURM itself expands it (`scontrol show hostnames`), where scontrol is
installed; ddp-doctor's own parser otherwise, or when scontrol does not answer."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from ddp_doctor.probes.runner import CommandResult, run_command
from ddp_doctor.readings.hostlist import expand_hostlist

Runner = Callable[..., CommandResult]

SCONTROL_TIMEOUT_S = 5.0


def expand_nodelist(nodelist: str, runner: Runner = run_command) -> tuple[list[str], str]:
    """(hosts in order, how they were found)."""
    scontrol = shutil.which("scontrol")
    if scontrol:
        result = runner([scontrol, "show", "hostnames", nodelist], timeout_s=SCONTROL_TIMEOUT_S)
        hosts = result.stdout.split()
        if result.returncode == 0 and hosts:
            return hosts, "scontrol show hostnames"
    return expand_hostlist(nodelist), "expanded by ddp-doctor"
