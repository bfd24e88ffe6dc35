"""Log texts about the job as a whole, not one transport: NCCL's bootstrap finding ranks that
disagree (NCCL versions, a rank claimed twice, world sizes), a fabric that is not ready for
CUDA (Fabric Manager), and the ways schedulers kill or stop a job (srun's OOM line, PBS, LSF,
srun's node failure, the kubelet's disk evictions and node shutdowns).

Each wording was checked against its source: NCCL's init.cc and bootstrap.cc (2.4 - 2.28) and
transport/nvls.cc, the CUDA runtime's error strings, SchedMD/slurm's srun, OpenPBS's MOM, LSF's
job exit reasons and the kubelet's eviction and node-shutdown messages (threads in the
comments). They come after patterns_hosts.py and patterns_fabric.py in the table.
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern

JOB_PATTERNS: tuple[Pattern, ...] = (
    # NCCL init.cc: "NCCL WARN Mismatched NCCL version detected : rank 1 version 21805 rank 0
    #   version 21903"; bootstrap.cc (2.2x): "NCCL version mismatch with remote peer
    #   10.0.0.2<44321> (local: 22703, remote 22105)" (NVIDIA/nccl src, 2.28)
    Pattern(
        "DDP306",
        "version-skew",
        ("Mismatched NCCL version detected", "NCCL version mismatch with remote peer"),
        "NCCL found ranks with different NCCL versions[: {version} and {other_version}]",
        fields={
            "version": (r"rank \d+ version (\d+) rank", r"\(local: (\d+)"),
            "other_version": (r"rank \d+ version \d+ rank \d+ version (\d+)", r"remote (\d+)\)"),
        },
    ),
    # NCCL bootstrap.cc (2.4 - 2.28): "Bootstrap Root : rank 1 of 2 ranks has already checked
    #   in" (two processes claimed one rank); "Bootstrap Root : mismatch in rank count from
    #   procs 4 : 2" (their world sizes differ)
    Pattern(
        "DDP233",
        "same-rank-on-every-process",
        ("ranks has already checked in",),
        "NCCL's bootstrap saw[ rank {rank}] join twice: two processes were given the same rank",
        fields={"rank": (r"rank (\d+) of \d+ ranks has already",)},
    ),
    Pattern(
        "DDP207",
        "world-size-mismatch",
        ("mismatch in rank count from procs", "mismatch in info from procs"),
        "NCCL's bootstrap found ranks with different world sizes[: {expected} and {joined}]",
        fields={
            "expected": (r"rank count from procs (\d+)", r"nranks (\d+) vs"),
            "joined": (r"rank count from procs \d+ : (\d+)", r"nranks \d+ vs (\d+)"),
        },
    ),
    # An NVSwitch system whose Fabric Manager is not running: CUDA's cudaErrorSystemNotReady
    #   (802), "CUDA error: system not yet initialized"; NCCL: "Cuda failure 'system not yet
    #   initialized'" (NVIDIA/nccl#790)
    Pattern(
        "DDP325",
        "nvswitch-fabric-not-ready",
        # NCCL >= 2.17 (transport/nvls.cc): "Failed to bind NVLink SHARP (NVLS) Multicast memory
        #   of size N : CUDA error 801 '...'. This is usually caused by a system or configuration
        #   error in the Fabric Manager or NVSwitches."
        (
            "system not yet initialized",
            "cudaErrorSystemNotReady",
            "Failed to bind NVLink SHARP (NVLS) Multicast memory",
        ),
        "CUDA reports the system not yet initialized: on an NVSwitch machine the Fabric "
        "Manager is not running, or the GPUs have not joined its fabric",
    ),
    # Other ways a scheduler stops a job from outside: PBS "=>> PBS: job killed: walltime 86420
    #   exceeded limit 86400"; LSF exit reasons "TERM_RUNLIMIT: job killed after reaching LSF
    #   run time limit.", "TERM_OWNER: job killed by owner.", "TERM_PREEMPT: job killed after
    #   preemption."; srun "srun: error: Node failure on node-3"; the kubelet evicting for
    #   disk ("Pod ephemeral local storage usage exceeds the total limit of containers 10Gi.",
    #   "Container x exceeded its local ephemeral storage limit") or on a node shutdown ("Pod
    #   was terminated in response to imminent node shutdown.")
    Pattern(
        "DDP507",
        "job-cancelled",
        (
            "PBS: job killed: walltime",
            "TERM_RUNLIMIT",
            "TERM_OWNER",
            "TERM_PREEMPT",
            "TERM_ADMIN",
            "exceeded wallclock limit",  # Moab: "MOAB_INFO:  job exceeded wallclock limit"
            # Torque's abort mail: "Aborted by PBS Server / Job exceeded its walltime limit. Job
            #   was aborted" (its Exit_status=-11 is PBS's code for it, no SIGSEGV)
            "exceeded its walltime limit",
            "Node failure on",
            "ephemeral local storage usage exceeds",
            "exceeded its local ephemeral storage limit",
            "imminent node shutdown",
        ),
        "the job was stopped from outside[ ({reason})][: {elapsed} s of {limit} s]",
        fields={
            "reason": (
                r"(TERM_[A-Z_]+)",
                r"(walltime|wallclock|Node failure|ephemeral|node shutdown)",
            ),
            "elapsed": (r"walltime (\d+) exceeded",),
            "limit": (r"walltime \d+ exceeded limit (\d+)",),
        },
    ),
    # Ray's raylet when a worker process dies under a task or an actor (src/ray/raylet
    #   node_manager.cc; python/ray/exceptions.py): "A worker died or was killed while executing a
    #   task by an unexpected system error. ... Worker exit type: SYSTEM_ERROR Worker exit
    #   detail: Worker unexpectedly exits with a connection error code 2. End of file."
    #   (verl-project/verl#472), "The actor is dead because its worker process has died." Its
    #   stock list of possible causes names the OOM killer, but only the memory monitor's own
    #   line (patterns_hosts.py) is memory evidence.
    Pattern(
        "DDP307",
        "rank-crashed",
        (
            "worker died or was killed while executing",
            "because its worker process has died",
            "Worker exit type: SYSTEM_ERROR",
        ),
        "a Ray worker process died[ (worker exit type {exit_type})][: {detail}]",
        fields={
            "exit_type": (r"Worker exit type: (\w+)",),
            "detail": (r"Worker exit detail: (.+?)(?: There are some potential|\s*$)",),
        },
    ),
)
