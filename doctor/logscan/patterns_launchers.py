"""Log texts of the launchers around the ranks that the rank rows (patterns_ranks.py) leave:
srun's report of a task killed by a signal in strsignal's words ("task 0: Killed"), and
torchrun's own exception when the launcher itself gets a signal. (deepspeed's, subprocess's and
mpirun's reports of a dead rank are in patterns_ranks.py; the schedulers' stops and memory kills
in patterns_jobs.py, patterns_fabric.py and patterns_hosts.py.)

A signal is named (a number or strsignal's words become SIGKILL, SIGSEGV ...), and the row's
role follows it (crash_role): a rank killed by a signal is a cause, an exit code only reports an
error printed above it. Each wording was read as users pasted it (owner/repo#number beside it).
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern
from ddp_doctor.logscan.patterns_ranks import crash_role

_STRSIGNAL = r"([A-Z][a-z]+(?: [a-z]+)?)"  # "Killed", "Segmentation fault", "Bus error"
_LINE_END = r"[\s|'\"`]*$"  # the line's end, past a paste's quote or table border ("... |")

LAUNCHER_PATTERNS: tuple[Pattern, ...] = (
    # srun's report of a task its step lost, in strsignal's words: "srun: error: c002: task 0:
    #   Killed" (ArjunaCluster/ArjunaUsers#48; many tasks at once: tonyyxliu/CUHKSZ-CSC4005#51).
    #   "task 0: Out Of Memory" is the cgroup's OOM kill (patterns_hosts.py, DDP504); a
    #   segmentation fault, bus error, illegal instruction or FPE is the rank rows' srun row
    #   (patterns_ranks.py), which comes first.
    Pattern(
        "DDP307",
        "rank-crashed",
        ("srun: error: ",),
        "SLURM task {slurm_task}[ on {host}] was killed by {signal} (srun)",
        fields={
            "slurm_task": (r"task (\d+): ",),
            "host": (r"srun: error: ([\w.-]+): task",),
            "signal": (r"task \d+: " + _STRSIGNAL + _LINE_END,),
        },
        confirm=r"task \d+: (?:Killed|Aborted|Terminated)" + _LINE_END,
        role_of=crash_role,
    ),
    # torchrun's own handler when the launcher itself gets a signal (torch >= 1.12,
    #   elastic/multiprocessing/api.py _terminate_process_handler): "torch.distributed.elastic.
    #   multiprocessing.api.SignalException: Process 8665 got signal: 1" (SIGHUP: zai-org/
    #   ChatGLM2-6B#238; 15: NVIDIA/nvidia-resiliency-ext#18), often pasted without the
    #   agent's "Received 1 death signal" line
    Pattern(
        "DDP507",
        "job-cancelled",
        ("SignalException: Process",),
        "the job was stopped from outside (torchrun got {signal})",
        fields={"signal": (r"got signal: (\d+)",)},
        confirm=r"SignalException: Process \d+ got signal: \d+",
    ),
)
