"""Records `attach` on the real jobs of fixtures/attach as fixtures/attach/reports/*.json.

Run by hand on a CPU machine as root: `python tests/record_attach_fixtures.py`. Each file is
the JSON report `attach --format json` printed (so `diagnose` reads it), with "description"
and "expect" (the codes that must fire when it is judged again; tests/test_attach_fixtures.py
checks them). The repository's own folder is replaced by /home/user/train, so no path of the
recording machine is kept.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import psutil
from attach_jobs import FIXTURES, as_nobody, attach, running, wait_for_status

REPO = FIXTURES.parent.parent
OUT = FIXTURES / "reports"
CASES = {
    "dataset-blocks": ("dataset_blocks.py", ["DDP302"], "rank 1 blocks in its dataset"),
    "barrier-poll": ("barrier_poll.py", ["DDP302"], "rank 0 in barrier, rank 1 polls a file"),
    "healthy": ("healthy.py", ["DDP706"], "a job that keeps stepping"),
    "straggler": ("straggler.py", ["DDP704", "DDP706"], "rank 1 sleeps 0.3 s every step"),
    "mismatch": ("mismatch.py", ["DDP304"], "rank 0 in all_reduce, rank 1 in broadcast"),
    "worker-killed": (
        "worker_killed.py",
        ["DDP302", "DDP703"],
        "rank 1's worker killed itself while rank 1 waits in DDP's all-reduce for rank 0",
    ),
    "worker-stopped": ("worker_stopped.py", ["DDP302", "DDP703"], "rank 1's worker stopped"),
    "ptrace-refused": (
        "dataset_blocks.py",
        ["DDP701"],
        "the job runs as nobody, attach without CAP_SYS_PTRACE",
    ),
}

WAIT_FOR = {"worker-stopped": psutil.STATUS_STOPPED, "worker-killed": psutil.STATUS_ZOMBIE}


def record(name: str) -> None:
    script, expect, description = CASES[name]
    options = ["--samples", "4", "--interval", "1"] if name == "straggler" else []
    extra = as_nobody() if name == "ptrace-refused" else {}
    no_ptrace = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    with tempfile.TemporaryDirectory() as folder, running(script, Path(folder), **extra) as job:
        job.wait_ready()
        if name in WAIT_FOR:  # the job stops or kills a process of its own
            wait_for_status(job, WAIT_FOR[name])
            time.sleep(1)
        prefix = no_ptrace if name == "ptrace-refused" else []
        attached = attach(job.process.pid, *options, prefix=prefix)
    report = {**attached.report, "description": description, "expect": expect}
    text = json.dumps(report, indent=1, ensure_ascii=False).replace(str(REPO), "/home/user/train")
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(text + "\n")
    print(name, [f["code"] for f in attached.report["findings"]], f"{attached.seconds:.1f} s")


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        record(case)
