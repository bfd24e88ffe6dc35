"""Log texts of collectives that hang or disagree, and of ranks that die (DDP3xx, DDP234)."""

from __future__ import annotations

from ddp_doctor.logscan.crash_fixes import signal_name
from ddp_doctor.logscan.pattern import Evidence, Pattern, Role
from ddp_doctor.model import Remediation

_NUMBER = r"(-?\d+)"

# Killed by one of these, a rank died of its own accord (or the host's OOM killer). SIGTERM is
# torchrun stopping the survivors, SIGABRT an abort whose reason is printed above it.
CAUSE_SIGNALS = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})
DATALOADER_SIGNALS = ("Killed", "Terminated", "Segmentation fault", "Aborted")  # strsignal's


def _killed_by_a_signal(evidence: Evidence) -> bool:
    status = evidence.get("exit_status")
    return (isinstance(status, int) and status < 0) or bool(evidence.get("killed_by"))


def _summary_line_role(evidence: Evidence) -> Role:
    """A line of torchrun's summary read alone: its keys are its own (exit_status, killed_by),
    so inside a whole summary it adds nothing to the root cause's facts; a SIGKILL is left a
    symptom, as the reason for it (an OOM kill, a cancel) is a cause of its own where the log
    has one."""
    name = evidence.get("killed_by")
    status = evidence.get("exit_status")
    if not name and isinstance(status, int):
        name = signal_name(status)
    return Role.CAUSE if name in CAUSE_SIGNALS - {"SIGKILL"} else Role.SYMPTOM


def crash_role(evidence: Evidence) -> Role:
    """A rank killed by a signal is a cause; an exit code reports an error printed above."""
    return Role.CAUSE if evidence.get("signal") in CAUSE_SIGNALS else Role.SYMPTOM


# Ordered by how often each is the reason in real logs: ranks running different code first.
HANG_FIX = Remediation(
    "Most hangs are ranks running different code: one rank skipped or added a collective (a "
    "barrier, all_reduce, or a DDP forward under `if rank == 0:`, an early return, uneven "
    "batches). 1) Run `ddp-doctor check` on the training script (DDP120 finds collectives "
    "under rank guards). 2) Rerun with the flight recorder on and read its dumps with "
    "`ddp-doctor logs DIR`: it names the collective some ranks entered and others never "
    "reached. 3) TORCH_DISTRIBUTED_DEBUG=DETAIL reports mismatched collectives as they "
    "happen. 4) Only then suspect the link: NCCL_SOCKET_IFNAME, and NCCL_P2P_DISABLE=1 to "
    "bisect PCIe ACS/IOMMU problems.",
    (
        "ddp-doctor check train.py",
        "mkdir -p fr && TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
        "TORCH_FR_DUMP_TEMP_FILE=$PWD/fr/rank_ torchrun --nproc-per-node=N train.py",
        "ddp-doctor logs fr/",
    ),
)

NCCL_REMOTE_ERROR = Pattern(
    "DDP234",
    "peer-exited-early",
    ("remote process exited", "remote process exiting prematurely"),
    "NCCL lost a peer: a remote rank exited, or the network between the ranks failed",
    fields={"nccl_version": (r"NCCL version ([\w.+-]+)",)},
    role=Role.SYMPTOM,
)

RANK_PATTERNS: tuple[Pattern, ...] = (
    # 1.8 - 1.9:  [E ProcessGroupNCCL.cpp:566] [Rank 1] Watchdog caught collective operation
    #             timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800494
    #             milliseconds before timing out.
    # 1.10 - 2.0: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000)
    # >= 2.1:     WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1,
    #             Timeout(ms)=600000)  (NVIDIA/Megatron-LM#1207); >= 2.4 "[PG 0 Rank 7]" or
    #             "[PG ID 0 PG GUID 0(default_pg) Rank 1]" before it (pytorch/pytorch#118369)
    Pattern(
        "DDP302",
        "collective-hang",
        # >= 2.2: "[PG 1 Rank 0] Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last
        #   completed NCCL work: 7752." (hiyouga/LlamaFactory#6269); >= 2.5: "Received a dump
        #   signal due to a collective timeout from this local rank and we will try our best to
        #   dump the debug info." ("from rank 7" on the others)
        (
            # short of "operation timeout": pastes hard-wrap the line there, excerpts cut it
            "Watchdog caught collective",
            "Timeout at NCCL work: ",
            "dump signal due to a collective timeout from",
        ),
        "[rank {rank}: ]collective {op_type}[ (SeqNum {seq})] did not finish within the "
        "[{timeout_ms} ms ]timeout: a rank stopped calling collectives, or a link hangs",
        fields={
            "rank": (r"Rank (\d+)\]",),
            "op_type": (r"OpType=(\w+)",),
            "seq": (r"SeqNum=(\d+)",),
            "timeout_ms": (r"Timeout\(ms\)=(\d+)",),
            "ran_ms": (r"ran for (\d+) milliseconds",),
            "numel_in": (r"NumelIn=(\d+)",),
        },
        role=Role.SYMPTOM,
        priority=1,
        fix=HANG_FIX,
    ),
    # gloo (lab notes): [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out
    #                   waiting 10000ms for recv operation to complete
    # NCCL >= 1.10 after a timeout: "Some NCCL operations have failed or timed out."
    Pattern(
        "DDP302",
        "collective-hang",
        # gloo tcp/pair.cc, a peer that stopped sending or reading in a collective: "Read timeout
        #   [10.0.0.2]:5555", "Write timeout [10.0.0.2]:5555" (facebookincubator/gloo)
        (
            "operation to complete",
            "Some NCCL operations have failed or timed out",
            "Read timeout [",
            "Write timeout [",
        ),
        "[rank {rank}: ][{op_type} ]operation did not finish[ within {timeout_ms} ms]",
        fields={
            "rank": (r"\[Rank (\d+)\]",),
            "op_type": (r"for (\w+) operation to complete",),
            "timeout_ms": (r"Timed out waiting (\d+)\s*ms",),
        },
        confirm=r"Timed out waiting \d+\s*ms for \w+ operation|failed or timed out|"
        r"(?:Read|Write) timeout \[",
        role=Role.SYMPTOM,
        fix=HANG_FIX,
    ),
    # >= 1.13 with TORCH_DISTRIBUTED_DEBUG=DETAIL: RuntimeError: Detected mismatch between
    #   collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber
    #   =9, OpType=ALLREDUCE, ...), but Rank 1 is running collective: CollectiveFingerPrint(
    #   ... OpType=BROADCAST ...)
    # gloo, sizes differ (lab notes): Received data size doesn't match expected size
    Pattern(
        "DDP304",
        "mismatched-collectives",
        # gloo tcp/pair.cc, a message longer than the receiver's buffer: "[enforce fail at
        #   .../gloo/transport/tcp/pair.cc:322] op.preamble.length <= op.nbytes. 8773632 vs
        #   8386560" (pytorch/pytorch#36183)
        (
            "Detected mismatch between collectives",
            "doesn't match expected size",
            "op.preamble.length <= op.nbytes",
        ),
        "ranks called different collectives[: rank {rank} ran {op_type}][, rank {other_rank} "
        "ran {other_op_type}]",
        fields={
            "rank": (r"Rank (\d+) is running collective",),
            "op_type": (r"OpType=(\w+)",),
            "other_rank": (r"but Rank (\d+) is running",),
            "other_op_type": (r"but Rank \d+ is running collective: \w+\(.*?OpType=(\w+)",),
        },
    ),
    # NCCL (init.cc): WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1000
    # torch >= 2.0 repeats it after "ncclInvalidUsage ... Last error:" (NVIDIA/Megatron-LM#661)
    Pattern(
        "DDP305",
        "duplicate-gpu",
        # NCCL 2.28 (init.cc): "Multiple Ranks are using the same GPU/Partition. Set
        #   NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration."
        ("Duplicate GPU detected", "Multiple Ranks are using the same GPU"),
        "two ranks use one GPU[: rank {rank} and rank {other_rank} on the device at bus {bus_id}]",
        fields={
            "rank": (r"rank (\d+) and rank",),
            "other_rank": (r"and rank (\d+) both",),
            "bus_id": (r"CUDA device ([0-9a-fA-F]+)",),
        },
    ),
    # The agent's log when a worker exits (the ChildFailedError summary is read separately):
    # 1.9 - 2.1: ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)
    #            local_rank: 0 (pid: 1622990) of binary: /usr/bin/python
    # >= 2.2:    E0325 20:57:27.620000 2606 .../multiprocessing/api.py:869] failed (exitcode: -9)
    #            local_rank: 5 (pid: 2630) of binary: /root/miniconda3/bin/python
    Pattern(
        "DDP307",
        "rank-crashed",
        ("(exitcode: ",),
        "local rank {local_rank} exited with code {exitcode}[ ({signal})]",
        fields={
            "exitcode": (r"\(exitcode: " + _NUMBER + r"\)",),
            "local_rank": (r"\) local_rank: (\d+)",),
            "pid": (r"local_rank: \d+ \(pid: (\d+)\)",),
        },
        confirm=r"failed \(exitcode: -?\d+\) local_rank: \d+",
        role_of=crash_role,
        priority=2,
    ),
    # What is left of the ChildFailedError summary when a paste starts below its "Root Cause"
    #   line (torch/distributed/elastic/multiprocessing/errors): "  exitcode  : -11 (pid:
    #   1234)", "  traceback : Signal 11 (SIGSEGV) received by PID 1234"
    Pattern(
        "DDP307",
        "rank-crashed",
        ("exitcode  : ", "received by PID"),
        "a rank was killed[ by {killed_by}][ (exit code {exit_status})] (torchrun's failure "
        "summary)",
        fields={
            "exit_status": (r"exitcode\s+: (-?\d+)",),
            "killed_by": (r"Signal \d+ \((SIG\w+)\) received by PID",),
        },
        confirm=r"^\s*(?:\[\d+\]:\s*)?exitcode\s+: -?\d+ \(pid: \d+\)|Signal \d+ \(SIG\w+\) "
        r"received by PID",
        accept=_killed_by_a_signal,  # an exit code >= 0 reports an error printed above it
        role_of=_summary_line_role,
        priority=1,
    ),
    # Launchers that report a rank killed by a signal: DeepSpeed (launcher/launch.py
    #   sigkill_handler) "[...] exits with return code = -11"; torch.distributed.launch 1.x and
    #   accelerate (subprocess): "CalledProcessError: Command '[...]' died with
    #   <Signals.SIGSEGV: 11>." An exit code >= 0 reports an error printed above it.
    Pattern(
        "DDP307",
        "rank-crashed",
        ("exits with return code = -", "died with <Signals."),
        "a rank[ (local rank {local_rank})] was killed[ by {signal}][ (exit code {exitcode})]",
        fields={
            "exitcode": (r"exits with return code = (-\d+)",),
            "signal": (r"died with <Signals\.(SIG\w+): \d+>",),
            "local_rank": (r"--local_rank=(\d+)",),
        },
        confirm=r"exits with return code = -\d+|died with <Signals\.SIG\w+: \d+>",
        role_of=crash_role,
        priority=1,
    ),
    # Open MPI's launcher: "mpirun noticed that process rank 3 with PID 4242 on node node-1
    #   exited on signal 11 (Segmentation fault)." (open-mpi/ompi orte/ prte help texts)
    Pattern(
        "DDP307",
        "rank-crashed",
        ("mpirun noticed that process rank",),
        "rank {rank}[ on {host}] was killed by a signal[ ({signal})] (mpirun)",
        fields={
            "rank": (r"process rank (\d+)",),
            "host": (r"on node (\S+) exited",),
            "signal": (r"exited on signal (\d+)",),
        },
        confirm=r"exited on signal \d+",
        role_of=crash_role,
        priority=1,
    ),
    # srun's own line for a task a signal killed: "srun: error: node-3: task 0: Segmentation
    #   fault (core dumped)", "... task 5: Bus error" (SchedMD/slurm src/srun: strsignal's
    #   words); "Killed", "Terminated" and "Aborted" are patterns_launchers.py's srun row.
    Pattern(
        "DDP307",
        "rank-crashed",
        ("srun: error: ",),
        "SLURM task {task} died: {death}",
        fields={
            "task": (r"task (\d+): ",),
            "death": (
                r"task \d+: (Segmentation fault|Bus error|Illegal instruction|"
                r"Floating point exception)",
            ),
        },
        confirm=r"srun: error: .*task \d+: (?:Segmentation fault|Bus error|Illegal instruction|"
        r"Floating point exception)",
        priority=1,
    ),
    # A process's own last words when a signal kills it, by whoever printed them: Python's
    #   faulthandler "Fatal Python error: Segmentation fault" (or "Bus error"); the shell
    #   "Segmentation fault (core dumped)"; absl (JAX, TF) "*** SIGSEGV received at time=...";
    #   glog "*** SIGSEGV (@0x0) received by PID 1234 (TID 0x7f...) from PID 0; stack trace:
    #   ***"; UCX's handler "Caught signal 11 (Segmentation fault: address not mapped to object
    #   at address 0x8)" (openucx/ucx src/ucs/debug/debug.c); a DataLoader worker (torch
    #   utils/data/_utils/signal_handling.py): "ERROR: Unexpected segmentation fault encountered
    #   in worker." (its "is killed by signal: Segmentation fault.": the DataLoader row below)
    Pattern(
        "DDP307",
        "rank-crashed",
        (
            "Segmentation fault",
            "Fatal Python error: Bus error",
            "SIGSEGV received at time",
            "received by PID",
            "segmentation fault encountered in worker",
            "Caught signal ",  # UCX's handler for its UCX_ERROR_SIGNALS (ILL, SEGV, BUS, FPE)
        ),
        "a process died: {death}",
        fields={
            "death": (
                r"([Ss]egmentation fault|Bus error|Illegal instruction|Floating point exception|"
                r"SIGSEGV|SIGBUS|SIGILL|SIGFPE)",
            ),
        },
        confirm=r"segmentation fault encountered in worker|"
        r"Fatal Python error: (?:Segmentation fault|Bus error)|Segmentation fault\s+"
        r"\(core dumped\)|\*\*\* SIGSEGV received at time|Caught signal (?:4|7|8|11) \((?:Illegal "
        r"instruction|Bus error|Floating point exception|Segmentation fault)|\*\*\* SIG(?:SEGV|BUS|ILL|FPE) \(@0x[0-9a-f]+\) received by PID",
        priority=1,
    ),
    # A container runtime reporting 128 + 11 or 128 + 7 (kubectl describe "Exit Code: 139",
    #   docker "exited with code 139"): SIGSEGV / SIGBUS; 137 is in patterns_hosts.py
    Pattern(
        "DDP307",
        "rank-crashed",
        ("Exit Code:    139", "Exit Code: 139", "exited with code 139", "Exit Code:    135"),
        "a container was killed by a signal (exit code {container_exit})",
        fields={"container_exit": (r"(13[59])",)},
        priority=1,
    ),
    # torch.multiprocessing.spawn: ProcessExitedException: process 1 terminated with signal
    # SIGKILL  /  ProcessRaisedException: process 0 terminated with exit code 1
    Pattern(
        "DDP307",
        "rank-crashed",
        ("terminated with signal", "terminated with exit code"),
        "process {rank} (mp.spawn) died[ from {signal}][ with exit code {exitcode}]",
        fields={
            "rank": (r"process (\d+) terminated",),
            "signal": (r"terminated with signal (SIG\w+)",),
            "exitcode": (r"terminated with exit code (\d+)",),
        },
        confirm=r"process \d+ terminated with",
        role_of=crash_role,
        priority=2,
    ),
    # DataLoader (torch/utils/data/_utils/signal_handling.py, since 0.4): a worker's death by a
    #   signal, in strsignal's words: "RuntimeError: DataLoader worker (pid 9382) is killed by
    #   signal: Killed." (alibaba/Pai-Megatron-Patch#583, under [rank0]:), "... Terminated."
    #   (pytorch/pytorch#4507), "Segmentation fault.", "Aborted.". A SIGKILL says nothing about
    #   memory by itself (DDP504's explain text): with the kernel's or a scheduler's memory line
    #   in the log DDP504 comes first (inference.py). "Bus error" is /dev/shm's
    #   (patterns_platform.py).
    Pattern(
        "DDP307",
        "rank-crashed",
        tuple(f"is killed by signal: {words}" for words in DATALOADER_SIGNALS),
        "[rank {rank}: ]a DataLoader worker[ (pid {pid})] was killed by {signal}, and its "
        "rank raised",
        fields={
            "signal": (r"killed by signal: ([A-Z][a-z]+(?: [a-z]+)?)",),
            "pid": (r"worker \(pid (\d+)\)",),
        },
        role_of=crash_role,
    ),
    # What the survivors see when a peer exits, crashed or not:
    # gloo (pair.cc): Connection closed by peer [127.0.0.1]:41234; >= 2.6 adds "This is
    #   typically caused by a remote worker crashing. Check the logs of the remote worker ..."
    # gloo / c10d: Read error [10.0.0.2]:5321: Connection reset by peer; Windows 10054
    # NCCL >= 2.12 (ncclRemoteError): remote process exited or there was a network error;
    # torch: ncclRemoteError: A call failed possibly due to a network error or a remote
    # process exiting prematurely.  NCCL socket: "Connection closed by remote peer".
    Pattern(
        "DDP234",
        "peer-exited-early",
        (
            "Connection closed by peer",
            "Connection reset by peer",
            "system error: 10054",
            "(errno: 104 - ",
            "Connection closed by remote peer",
            # gloo tcp/pair.cc's other words for it: "Socket closed [10.0.0.2]:5555",
            #   "Socket unexpectedly closed [10.0.0.2]:5555" (facebookincubator/gloo)
            "Socket closed [",
            "Socket unexpectedly closed [",
        ),
        "the connection to a peer rank closed[ ({peer})]: that rank had exited (crashed, or "
        "left its training loop early) while this one still expected it",
        fields={
            "peer": (
                r"by (?:remote )?peer \[([^\]]+)\]",
                r"by (?:remote )?peer ([\w-]+(?:\.[\w-]+)*)",
                r"[Ss]ocket (?:unexpectedly )?closed \[([^\]]+)\]",
            )
        },
        role=Role.SYMPTOM,
        # Python's own exception: multiprocessing's connection to a DataLoader worker or a
        # tensor-sharing resource_sharer (torch/multiprocessing/reductions.py: pytorch/pytorch
        # #28950, quark0/darts#95), an HTTP
        # download; the process group's resets come from gloo, NCCL and c10d in C++
        unless=("ConnectionResetError: [Errno",),
    ),
    NCCL_REMOTE_ERROR,
)
