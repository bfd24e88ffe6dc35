"""Records `attach` on the real jobs of fixtures/attach as fixtures/attach/reports/*.json.

Run by hand on a CPU machine as root: `python tests/record_attach_fixtures.py`. Each file is
the JSON report `attach --format json` printed (so `diagnose` reads it), with "description"
and "expect" (the codes that must fire when it is judged again; tests/test_attach_fixtures.py
checks them). The repository's own folder is replaced by /home/user/train, so no path of the
recording machine is kept.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from pathlib import Path

from attach_jobs import FIXTURES, as_nobody, attach, running

REPO = FIXTURES.parent.parent
OUT = FIXTURES / "reports"
CASES = {
    "dataset-blocks": ("dataset_blocks.py", ["DDP302"], "rank 1 blocks in its dataset"),
    "barrier-poll": ("barrier_poll.py", ["DDP302"], "rank 0 in barrier, rank 1 polls a file"),
    "healthy": ("healthy.py", ["DDP706"], "a job that keeps stepping"),
    "straggler": ("straggler.py", ["DDP704", "DDP706"], "rank 1 sleeps 0.3 s every step"),
    "mismatch": ("mismatch.py", ["DDP304"], "rank 0 in all_reduce, rank 1 in broadcast"),
    "worker-stopped": ("worker_stopped.py", ["DDP302", "DDP703"], "rank 1's worker stopped"),
    "ptrace-refused": (
        "dataset_blocks.py",
        ["DDP701"],
        "the job runs as nobody, attach without CAP_SYS_PTRACE",
    ),
}


def record(name: str) -> None:
    script, expect, description = CASES[name]
    options = ["--samples", "4", "--interval", "1"] if name == "straggler" else []
    extra = as_nobody() if name == "ptrace-refused" else {}
    no_ptrace = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace"]
    with tempfile.TemporaryDirectory() as folder, running(script, Path(folder), **extra) as job:
        job.wait_ready()
        stopped = None
        if name == "worker-stopped":
            rank1 = next(p for p in job.ranks() if p.environ().get("RANK") == "1" and p.children())
            stopped = rank1.children()[0]
            stopped.send_signal(signal.SIGSTOP)
        prefix = no_ptrace if name == "ptrace-refused" else []
        attached = attach(job.process.pid, *options, prefix=prefix)
        if stopped is not None:
            stopped.send_signal(signal.SIGCONT)
    report = {**attached.report, "description": description, "expect": expect}
    text = json.dumps(report, indent=1, ensure_ascii=False).replace(str(REPO), "/home/user/train")
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(text + "\n")
    print(name, [f["code"] for f in attached.report["findings"]], f"{attached.seconds:.1f} s")


if __name__ == "__main__":
    for case in sys.argv[1:] or list(CASES):
        record(case)
