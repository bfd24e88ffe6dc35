"""Log texts of the launchers around the ranks: how deepspeed, accelerate (any launcher that runs
the ranks through Python's subprocess), mpirun and srun report a rank or task that died, and
how torchrun reports a stop from outside in its own exception.

A signal is named (a number or strsignal's words become SIGKILL, SIGSEGV ...), and the row's
role follows it (crash_role): a rank killed by a signal is a cause, an exit code only reports an
error printed above it. Each wording was read as users pasted it (owner/repo#number beside it).
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern
from ddp_doctor.logscan.patterns_ranks import crash_role

_STRSIGNAL = r"([A-Z][a-z]+(?: [a-z]+)?)"  # "Killed", "Segmentation fault", "Bus error"

LAUNCHER_PATTERNS: tuple[Pattern, ...] = (
    # deepspeed's launcher (deepspeed/launcher/launch.py, sigkill_handler): "[ERROR]
    #   [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=1',
    #   ...] exits with return code = -9" (deepspeedai/DeepSpeed#4890, #3232; -11:
    #   deepspeedai/DeepSpeedExamples#626)
    Pattern(
        "DDP307",
        "rank-crashed",
        ("exits with return code = ",),
        "[local rank {local_rank}: ]a rank exited with code {exitcode}[ ({signal})] (deepspeed's "
        "launcher)",
        fields={
            "exitcode": (r"exits with return code = (-?\d+)",),
            "local_rank": (r"--local_rank=(\d+)",),
        },
        confirm=r"sigkill_handler|exits with return code = -?\d+",
        role_of=crash_role,
    ),
    # A launcher that runs the ranks with Python's subprocess (accelerate launch, deepspeed's
    #   runner): "subprocess.CalledProcessError: Command '[...]' died with <Signals.SIGKILL: 9>."
    #   (bmaltais/kohya_ss#1065)
    Pattern(
        "DDP307",
        "rank-crashed",
        ("died with <Signals.",),
        "a launched training process died from {signal}",
        fields={"signal": (r"died with <Signals\.(SIG\w+): \d+>",)},
        role_of=crash_role,
    ),
    # Open MPI's mpirun: "mpirun noticed that process rank 1 with PID 29013 on node 172.17.27.12
    #   exited on signal 6 (Aborted)." (facebookarchive/caffe2#360)
    Pattern(
        "DDP307",
        "rank-crashed",
        ("exited on signal",),
        "MPI rank {rank}[ on {host}] died from {signal} (mpirun)",
        fields={
            "rank": (r"process rank (\d+)",),
            "host": (r"on node (\S+) exited on signal",),
            "signal": (r"exited on signal (\d+)",),
        },
        confirm=r"process rank \d+ .*exited on signal \d+",
        role_of=crash_role,
    ),
    # srun's report of a task its step lost, in strsignal's words: "srun: error: c002: task 0:
    #   Killed" (ArjunaCluster/ArjunaUsers#48; many tasks at once: tonyyxliu/CUHKSZ-CSC4005#51).
    #   "task 0: Out Of Memory" is the cgroup's OOM kill (patterns_cluster.py, DDP504).
    Pattern(
        "DDP307",
        "rank-crashed",
        ("srun: error: ",),
        "SLURM task {slurm_task}[ on {host}] was killed by {signal} (srun)",
        fields={
            "slurm_task": (r"task (\d+): ",),
            "host": (r"srun: error: ([\w.-]+): task",),
            "signal": (r"task \d+: " + _STRSIGNAL + r"\s*$",),
        },
        confirm=r"task \d+: (?:Killed|Segmentation fault|Aborted|Bus error|Terminated)\s*$",
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
