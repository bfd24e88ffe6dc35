"""What to do about a rank that died, chosen by how it died: its signal or its exit code.

A shell reports a signal as 128+N (137 = SIGKILL), torchrun and mp.spawn as -N; both are read.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Mapping

from ddp_doctor.model import Remediation

SIGKILL_FIX = Remediation(
    "SIGKILL comes from outside the process and this log does not say who sent it: the "
    "kernel's out-of-memory killer or a memory limit (SLURM --mem, a cgroup, a container's "
    "limit), torchrun killing a rank that did not stop after SIGTERM, a scheduler, or a user "
    "(kill -9). Tell an out-of-memory kill by the host's kernel log (dmesg: 'Killed process'), "
    "the SLURM job's state (sacct -o State: OUT_OF_MEMORY) or the container's last state "
    "(OOMKilled). If it was memory: fewer DataLoader workers and a smaller prefetch_factor, "
    "lazy or memory-mapped datasets, torch.load(..., mmap=True), or more memory.",
    (
        "dmesg -T | grep -i -E 'killed process|out of memory'",
        "sacct -j JOBID -o JobID,State,ExitCode,MaxRSS",
        "kubectl get pod POD -o jsonpath='{.status.containerStatuses[*].lastState.terminated.reason}'",
    ),
)
_FIXES: dict[str, Remediation] = {
    "SIGKILL": SIGKILL_FIX,
    "SIGABRT": Remediation(
        "SIGABRT is an abort from native code; the reason is printed just above it: "
        "'terminate called after throwing an instance of ...', a gloo enforce failure, or "
        "the NCCL watchdog taking the process down after a collective timed out (then the "
        "hang is the problem: see the collective-hang finding). Rerun with "
        "TORCH_SHOW_CPP_STACKTRACES=1 to see where it aborted.",
        ("TORCH_SHOW_CPP_STACKTRACES=1 torchrun --nproc-per-node=N train.py",),
    ),
    "SIGSEGV": Remediation(
        "A segmentation fault is a crash in native code: a compiled package built for "
        "another torch or CUDA (torchvision, apex, flash-attn, deepspeed ops, a custom "
        "extension), or DataLoader workers forked after CUDA was initialised. Rerun with "
        "PYTHONFAULTHANDLER=1 to print the Python stack at the crash, and check that every "
        "compiled package matches this torch.",
        (
            "PYTHONFAULTHANDLER=1 torchrun --nproc-per-node=N train.py",
            "python -m pip list | grep -i -E 'torch|apex|flash|deepspeed|xformers'",
        ),
    ),
    "SIGBUS": Remediation(
        "A bus error in a training process is almost always shared memory running out: "
        "/dev/shm is too small for DataLoader workers or NCCL (in docker, run with "
        "--ipc=host or --shm-size=16g; elsewhere lower num_workers).",
        ("df -h /dev/shm",),
    ),
    "SIGTERM": Remediation(
        "SIGTERM came from outside the rank: torchrun stops the surviving ranks after the "
        "first one fails (read that rank's error: the root cause), or a scheduler or a user "
        "cancelled the job.",
    ),
    "SIGHUP": Remediation(
        "SIGHUP: the terminal or SSH session that started the job closed. Run it inside "
        "tmux or screen, with nohup or setsid, or through the scheduler.",
    ),
    "SIGINT": Remediation("SIGINT: the job was interrupted (Ctrl-C) from the terminal."),
}
_EXIT_CODE_FIXES: dict[int, Remediation] = {
    1: Remediation(
        "Exit code 1: the rank raised a Python exception. Its traceback is in this log (the "
        "rank's own 'Traceback' lines above the summary); if it is not, decorate the entry "
        "point with torch.distributed.elastic.multiprocessing.errors.record so torchrun "
        "writes it to error_file and prints it in the summary.",
    ),
    2: Remediation(
        "Exit code 2 is a command-line usage error: argparse rejected the script's "
        "arguments (often the launcher's --local-rank / --local_rank). Read the 'error:' "
        "line above; run the script with --help, and read the local rank from "
        "os.environ['LOCAL_RANK'] instead of an argument.",
    ),
}


def signal_name(exit_code: int) -> str | None:
    """-9 and 137 -> "SIGKILL"; None for an ordinary exit code."""
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if number <= 0:
        return None
    with contextlib.suppress(ValueError):  # not a signal number this platform knows
        return signal.Signals(number).name
    return None


def signal_of_description(words: str) -> str | None:
    """strsignal's words ("Killed", "Segmentation fault", as DataLoader prints them) -> the
    signal's name ("SIGKILL"); None for words no signal has here."""
    for number in signal.Signals:
        if signal.strsignal(number) == words:
            return number.name
    return None


def crash_fix(facts: Mapping[str, object]) -> Remediation | None:
    """The fix for a crash with these facts (`signal`, `exitcode`), or None for the general
    one."""
    named = facts.get("signal")
    if isinstance(named, str) and named.upper() in _FIXES:
        return _FIXES[named.upper()]
    exit_code = facts.get("exitcode")
    if isinstance(exit_code, int):
        name = signal_name(exit_code)
        if name in _FIXES:
            return _FIXES[name]
        return _EXIT_CODE_FIXES.get(exit_code)
    return None
