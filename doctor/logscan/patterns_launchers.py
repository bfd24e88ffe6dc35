"""Log texts of the launchers and schedulers around the ranks: how deepspeed, accelerate (any
launcher that runs the ranks through Python's subprocess), mpirun and srun report a rank or task
that died; how torchrun reports a stop from outside in its own exception; how LSF and PBS/Torque
(Moab) say they ended a job (SLURM's words are in patterns_training.py and patterns_cluster.py).

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
            "signal": (r"task \d+: " + _STRSIGNAL + _LINE_END,),
        },
        confirm=r"task \d+: (?:Killed|Segmentation fault|Aborted|Bus error|Terminated)" + _LINE_END,
        role_of=crash_role,
    ),
    # LSF's job report: "TERM_RUNLIMIT: job killed after reaching LSF run time limit." (marbl/
    #   canu#444), and its other TERM_ reasons for a job ended from outside (preempted, killed by
    #   its owner or an administrator); its memory limit, "TERM_MEMLIMIT: job killed after
    #   reaching LSF memory usage limit." (wheaton5/souporcell#20), is DDP504
    Pattern(
        "DDP507",
        "job-cancelled",
        ("TERM_RUNLIMIT", "TERM_PREEMPT", "TERM_OWNER", "TERM_ADMIN"),
        "the job was stopped from outside (LSF: {reason})",
        fields={"reason": (r"(TERM_[A-Z_]+)",)},
        confirm=r"TERM_[A-Z_]+: job killed",
    ),
    Pattern(
        "DDP504",
        "host-out-of-memory",
        ("TERM_MEMLIMIT",),
        "the job ran out of its memory limit and LSF killed it (TERM_MEMLIMIT)",
        confirm=r"TERM_MEMLIMIT: job killed",
    ),
    # PBS/Torque: "=>> PBS: job killed: walltime 259217 exceeded limit 259200" (biocore/qiime#1048);
    #   its memory limit, "=>> PBS: job killed: mem 38427376kb exceeded limit 33554432kb" (marbl/
    #   canu#530; "mem job total ... kb exceeded limit": dask/dask-jobqueue#178), is DDP504;
    #   Moab: "MOAB_INFO:  job exceeded wallclock limit" (CoBrALab/MAGeTbrain#20)
    Pattern(
        "DDP507",
        "job-cancelled",
        ("job killed: walltime", "exceeded wallclock limit"),
        "the job was stopped from outside (its wall-clock limit[: {elapsed} s of {limit} s])",
        fields={
            "elapsed": (r"walltime (\d+) exceeded",),
            "limit": (r"exceeded limit (\d+)",),
        },
    ),
    Pattern(
        "DDP504",
        "host-out-of-memory",
        ("job killed: mem", "job killed: vmem", "job killed: pmem"),
        "the job ran out of its memory limit and PBS killed it",
        confirm=r"job killed: [pv]?mem .*exceeded limit",
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
