"""`attach --slurm-job ID`: one `ddp-doctor attach --format json` per node of a SLURM job,
started beside the job's own steps with `srun --overlap`, each node's JSON read back from
srun's labelled output (no shared folder needed)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Sequence

from ddp_doctor.probes.runner import run_command

LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
SRUN_GRACE_S = 15.0  # srun's own start and teardown, beyond the nodes' --timeout


class SlurmUnavailable(Exception):
    """srun cannot be used here."""


def srun_argv(job_id: str, options: Sequence[str]) -> list[str]:
    srun = shutil.which("srun")
    if srun is None:
        raise SlurmUnavailable("srun is not on PATH: --slurm-job needs SLURM's srun")
    doctor = [sys.executable, "-m", "ddp_doctor"]  # the same install on every node
    return [
        srun, "--overlap", f"--jobid={job_id}", "--ntasks-per-node=1", "--label",
        "--kill-on-bad-exit=0", *doctor, "attach", "--format", "json",
        "--job", f"slurm {job_id}", *options,
    ]  # fmt: skip


def run_on_nodes(
    job_id: str, options: Sequence[str], timeout_s: float
) -> tuple[dict[int, object], dict[int, str]]:
    """(task -> its JSON report, task -> why it gave none)."""
    result = run_command(srun_argv(job_id, options), timeout_s + SRUN_GRACE_S)
    if result.timed_out:
        raise SlurmUnavailable(f"srun did not finish within {timeout_s + SRUN_GRACE_S:g} s")
    if result.spawn_error is not None:
        raise SlurmUnavailable(f"srun could not start: {result.spawn_error}")
    texts = split_labelled(result.stdout)
    if not texts:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SlurmUnavailable(f"srun gave no node report (exit {result.returncode}): {last}")
    reports, failed = {}, {}
    for task, text in sorted(texts.items()):
        try:
            reports[task] = json.loads(text)
        except json.JSONDecodeError:
            failed[task] = (text.strip().splitlines() or ["no output"])[-1][:200]
    return reports, failed


def split_labelled(output: str) -> dict[int, str]:
    """srun --label's interleaved lines ("3: text") back into each task's own output."""
    tasks: dict[int, list[str]] = {}
    for line in output.splitlines():
        match = LABEL.match(line)
        if match:
            tasks.setdefault(int(match.group(1)), []).append(match.group(2))
    return {task: "\n".join(lines) for task, lines in tasks.items()}
