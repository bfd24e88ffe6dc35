"""The one table of known log texts: `ddp-doctor logs` and the job probes read it alike.

Order matters: a line belongs to the first pattern that matches it, so specific texts come
before generic ones (a "NCCL WARN Duplicate GPU detected" line is DDP305, not DDP503). Each
pattern matches stable substrings, never whole lines; the comments list the wordings seen in
torch and NCCL versions (public issue threads, repo#number) that the anchors were chosen for.
"""

from __future__ import annotations

from ddp_doctor.model import Remediation, Severity

from .pattern import Evidence, Pattern, Role

_NUMBER = r"(-?\d+)"
_OOM_FIX = Remediation(
    "SIGKILL from outside the job is most often the kernel's OOM killer: the host ran out of "
    "RAM. Check the kernel log, then lower DataLoader num_workers/prefetch_factor, load data "
    "lazily, or request more memory per node.",
    ("dmesg -T | grep -i -E 'killed process|out of memory'",),
)


# Killed by one of these, a rank died of its own accord (or the host's OOM killer). SIGTERM is
# torchrun stopping the survivors, SIGABRT an abort whose reason is printed above it.
_CAUSE_SIGNALS = frozenset({"SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE"})


def _crash_role(evidence: Evidence) -> Role:
    """A rank killed by a signal is a cause; an exit code reports an error printed above."""
    return Role.CAUSE if evidence.get("signal") in _CAUSE_SIGNALS else Role.SYMPTOM


PATTERNS: tuple[Pattern, ...] = (
    # --- rendezvous and network -------------------------------------------------------------
    # torch <= 1.8:  RuntimeError: Address already in use
    # 1.9 - 2.2:     [W socket.cpp:426] [c10d] The server socket has failed to bind to
    #                [::]:29500 (errno: 98 - Address already in use).  (pytorch/pytorch#85604)
    # >= 2.3:        DistNetworkError: The server socket has failed to listen on any local
    #                network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE,
    #                message: address already in use  (macOS: code -48; vllm-project/vllm#39015)
    Pattern(
        "DDP201",
        "master-port-in-use",
        ("EADDRINUSE", "Address already in use", "address already in use"),
        "the rendezvous port[ {port}] is already in use (EADDRINUSE): another job, or a stale "
        "one, listens on it",
        fields={"port": (r"\bport: (\d+)", r":(\d+) \(errno: \d+ - Address already in use")},
    ),
    # client, >= 2.0: The client socket has timed out after 5000ms while trying to connect to
    #                 (127.0.0.1, 29500).   1.x: connect() timed out. Original timeout was N ms.
    # master, >= 2.0: Timed out after 6 seconds waiting for clients. 1/2 clients joined.
    # 1.8 - 1.13:     Timed out initializing process group in store based barrier on rank: 0,
    #                 for key: store_based_barrier_key:1 (world_size=2, worker_count=1, ...)
    # torchrun c10d:  torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
    Pattern(
        "DDP202",
        "rendezvous-timeout",
        (
            "socket has timed out",
            "waiting for clients",
            "Original timeout was",
            "in store based barrier",
            "RendezvousTimeoutError",
        ),
        "a rank never joined the rendezvous[: {joined} of {expected} joined][; the client "
        "could not reach {master}:{port}][ within {timeout_ms} ms]",
        fields={
            "timeout_ms": (r"timed out after (\d+)\s*ms", r"Original timeout was (\d+) ms"),
            "joined": (r"(\d+)/\d+ clients joined", r"worker_count=(\d+)"),
            "expected": (r"\d+/(\d+) clients joined", r"world_size=(\d+)"),
            "master": (r"connect to \(([^,\s)]+), \d+\)",),
            "port": (r"connect to \([^,\s)]+, (\d+)\)",),
        },
    ),
    # 2.x: [W socket.cpp:697] [c10d] The IPv4 network addresses of (node-7, 29500) cannot be
    #      retrieved (gai error: -2 - Name or service not known).  Python: socket.gaierror:
    #      [Errno -2] Name or service not known.  macOS: nodename nor servname provided.
    # The IPv6 variant alone is harmless noise on IPv4-only hosts, so it is left out.
    Pattern(
        "DDP203",
        "master-addr-unresolvable",
        (
            "Name or service not known",
            "nodename nor servname provided",
            "Temporary failure in name resolution",
            "No address associated with hostname",
        ),
        "a host name does not resolve[: {host}]",
        fields={"host": (r"addresses of \(([^,\s)]+),", r"\[([^\]\s]+)\]:\d+")},
        unless=("IPv6",),
    ),
    # NCCL: "NCCL WARN Bootstrap : no socket interface found" (NVIDIA/nccl#286)
    # gloo: "[enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83]
    #        ifa != nullptr. Unable to find address for: eth1"
    Pattern(
        "DDP205",
        "wrong-network-interface",
        ("no socket interface found", "Unable to find address for"),
        "no usable network interface[: {interface} does not exist on this host]",
        fields={"interface": (r"Unable to find address for: (\S+)",)},
    ),
    # gloo (lab notes): Gloo connectFullMesh failed with ... Connection refused,
    #                   remote=[127.0.0.1]:29400
    # NCCL: NCCL WARN socketStartConnect: Connect to 10.0.0.2<40321> failed : Connection refused
    Pattern(
        "DDP206",
        "connection-refused",
        ("Connection refused",),
        "a connection between ranks was refused[ by {host}][:{port}]: a firewall, or nothing "
        "listening there",
        fields={
            "host": (r"remote=\[([^\]]+)\]", r"Connect to ([\w.:-]+)<\d+>"),
            "port": (r"remote=\[[^\]]+\]:(\d+)", r"Connect to [\w.:-]+<(\d+)>"),
        },
        # c10d retries with "[W socket.cpp] The client socket has failed to connect to
        # [node-0]:29500 (errno: 111 - Connection refused)" until the master is up: harmless
        unless=("client socket has failed to connect",),
    ),
    # --- collectives ------------------------------------------------------------------------
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
        ("Watchdog caught collective operation timeout",),
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
    ),
    # gloo (lab notes): [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out
    #                   waiting 10000ms for recv operation to complete
    # NCCL >= 1.10 after a timeout: "Some NCCL operations have failed or timed out."
    Pattern(
        "DDP302",
        "collective-hang",
        ("operation to complete", "Some NCCL operations have failed or timed out"),
        "[rank {rank}: ][{op_type} ]operation did not finish[ within {timeout_ms} ms]",
        fields={
            "rank": (r"\[Rank (\d+)\]",),
            "op_type": (r"for (\w+) operation to complete",),
            "timeout_ms": (r"Timed out waiting (\d+)\s*ms",),
        },
        confirm=r"Timed out waiting \d+\s*ms for \w+ operation|failed or timed out",
        role=Role.SYMPTOM,
    ),
    # >= 1.13 with TORCH_DISTRIBUTED_DEBUG=DETAIL: RuntimeError: Detected mismatch between
    #   collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber
    #   =9, OpType=ALLREDUCE, ...), but Rank 1 is running collective: CollectiveFingerPrint(
    #   ... OpType=BROADCAST ...)
    # gloo, sizes differ (lab notes): Received data size doesn't match expected size
    Pattern(
        "DDP304",
        "mismatched-collectives",
        ("Detected mismatch between collectives", "doesn't match expected size"),
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
        ("Duplicate GPU detected",),
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
        role_of=_crash_role,
        priority=2,
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
        role_of=_crash_role,
        priority=2,
    ),
    # What the survivors see when a peer dies:
    # gloo / c10d (lab notes): Connection closed by peer [127.0.0.1]:41234
    # NCCL >= 2.12 (ncclRemoteError): remote process exited or there was a network error;
    # torch: ncclRemoteError: A call failed possibly due to a network error or a remote
    # process exiting prematurely.
    Pattern(
        "DDP307",
        "rank-crashed",
        (
            "Connection closed by peer",
            "Connection reset by peer",
            "remote process exited",
            "remote process exiting prematurely",
        ),
        "the connection to a peer rank broke: another rank crashed or exited first, or the "
        "network failed",
        role=Role.SYMPTOM,
    ),
    # --- install, platform and devices -------------------------------------------------------
    # AssertionError: Torch not compiled with CUDA enabled  (all versions; pytorch/pytorch#28111)
    Pattern(
        "DDP002",
        "cpu-only-torch-on-gpu-host",
        ("Torch not compiled with CUDA enabled",),
        "CUDA was used but this torch build has no CUDA support (a +cpu wheel)",
    ),
    # CUDA driver version is insufficient for CUDA runtime version (torch 1.x: cuda runtime
    # error (35)); torch >= 1.6: The NVIDIA driver on your system is too old (found version N)
    Pattern(
        "DDP003",
        "driver-too-old",
        (
            "driver version is insufficient for CUDA runtime",
            "NVIDIA driver on your system is too old",
        ),
        "the NVIDIA driver is too old for this torch's CUDA runtime[ (the driver reports "
        "version {driver_cuda})]",
        fields={"driver_cuda": (r"found version (\d+)",)},
    ),
    # >= 1.13 warning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible
    #   with the current PyTorch installation. (pytorch/pytorch#150733)
    # all versions: CUDA error: no kernel image is available for execution on the device
    #   (1.x: cuda runtime error (209) : no kernel image is available ...)
    Pattern(
        "DDP004",
        "gpu-arch-unsupported",
        ("no kernel image is available", "is not compatible with the current PyTorch installation"),
        "this torch build has no kernels for the GPU[ ({arch})]",
        fields={
            "arch": (r"CUDA capability (sm_\d+)",),
            "gpu": (r"([\w() -]+?) with CUDA capability",),
        },
    ),
    # RuntimeError: Distributed package doesn't have NCCL built in (Windows, macOS, CPU wheels)
    Pattern(
        "DDP005",
        "nccl-unavailable",
        ("have NCCL built in",),
        "backend nccl was requested but this torch has no NCCL (Windows, macOS or a CPU wheel)",
    ),
    # torch >= 2.4 on Windows: use_libuv was requested but PyTorch was build without libuv
    # support (pytorch/pytorch#139990; "build" sic)
    Pattern(
        "DDP006",
        "windows-libuv-store",
        ("without libuv support",),
        "the TCP store asked for libuv, which this Windows torch lacks",
        severity=Severity.ERROR,
    ),
    Pattern(
        "DDP007",
        "windows-gloo-limits",
        ("unsupported gloo device",),
        "gloo on Windows could not use the device ('unsupported gloo device')",
        severity=Severity.ERROR,
    ),
    # NCCL <= 2.11: NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size N)
    # NCCL >= 2.12: NCCL WARN Error: failed to extend /dev/shm/nccl-x to 9637892 bytes
    # DataLoader:   ERROR: Unexpected bus error encountered in worker. This might be caused by
    #               insufficient shared memory (shm).  /  is killed by signal: Bus error.
    # torch:        unable to write to file </torch_18692_1954506624>: No space left on device
    Pattern(
        "DDP008",
        "dev-shm-too-small",
        (
            "Error while creating shared memory segment",
            "failed to extend /dev/shm",
            "insufficient shared memory",
            "killed by signal: Bus error",
            "unable to write to file </torch_",
        ),
        "shared memory (/dev/shm) ran out[ creating {shm_path}][ ({size} bytes)]",
        fields={
            "shm_path": (r"(/dev/shm/[\w.-]+)",),
            "size": (r"\(size (\d+)\)", r"to (\d+) bytes"),
        },
        severity=Severity.ERROR,  # registered as a warning about the size; here it failed
    ),
    # NCCL_ASYNC_ERROR_HANDLING, NCCL_BLOCKING_WAIT, NCCL_DESYNC_DEBUG (torch >= 2.2):
    # [W Utils.hpp:133] Warning: Environment variable NCCL_BLOCKING_WAIT is deprecated; use
    # TORCH_NCCL_BLOCKING_WAIT instead (function getCvarBool)
    Pattern(
        "DDP009",
        "deprecated-nccl-env",
        ("is deprecated; use TORCH_NCCL_",),
        "{variable} is deprecated: torch reads TORCH_{variable}",
        fields={"variable": (r"(NCCL_\w+) is deprecated",)},
        role=Role.NOTE,
    ),
    # CUDA error: all CUDA-capable devices are busy or unavailable (pytorch/pytorch#3871)
    Pattern(
        "DDP024",
        "exclusive-compute-mode",
        ("devices are busy or unavailable",),
        "the GPUs refused a new context (busy or unavailable: exclusive compute mode or a "
        "stray process)",
        severity=Severity.ERROR,
    ),
    # CUDA error: uncorrectable ECC error encountered (verl-project/verl#407)
    Pattern(
        "DDP025",
        "ecc-errors",
        ("uncorrectable ECC error",),
        "a GPU reported an uncorrectable ECC error[ (rank {rank})]",
    ),
    # CUDA error: invalid device ordinal (all versions; meta-llama/llama#946)
    Pattern(
        "DDP027",
        "more-ranks-than-gpus",
        ("invalid device ordinal",),
        "[rank {rank} ]asked for a GPU index that does not exist (invalid device ordinal): "
        "more ranks per node than visible GPUs",
    ),
    # --- the user's script and launch ---------------------------------------------------------
    # torch 1.x launch passes --local_rank; a script that reads only LOCAL_RANK rejects it:
    # train.py: error: unrecognized arguments: --local_rank=0 (hkchengrex/XMem#18)
    Pattern(
        "DDP102",
        "launch-module-deprecated",
        ("unrecognized arguments: --local_rank",),
        "the deprecated torch.distributed.launch passed --local_rank, which the script does "
        "not accept",
        severity=Severity.ERROR,
        fix=Remediation(
            "Launch with torchrun (it passes no argument) and read os.environ['LOCAL_RANK'].",
            ("torchrun --nproc-per-node=N train.py",),
        ),
        priority=1,
    ),
    # torch 1.9 - 2.x: FutureWarning: The module torch.distributed.launch is deprecated and
    # will be removed in future. Use torchrun.
    Pattern(
        "DDP102",
        "launch-module-deprecated",
        ("torch.distributed.launch is deprecated",),
        "the run used the deprecated torch.distributed.launch",
        severity=Severity.WARNING,
        role=Role.NOTE,
    ),
    # torch >= 2.0 launch passes --local-rank; a script declaring only --local_rank rejects it:
    # train.py: error: unrecognized arguments: --local-rank=0 (XPixelGroup/BasicSR#626)
    Pattern(
        "DDP103",
        "local-rank-argparse-only",
        ("unrecognized arguments: --local-rank",),
        "the script declares only --local_rank, but torch >= 2.0 passes --local-rank",
        severity=Severity.ERROR,
    ),
    # --- DDP and memory (DDP5xx, defined in codes.py) ----------------------------------------
    # all versions: RuntimeError: Expected to have finished reduction in the prior iteration
    #   before starting a new one. This error indicates that your module has parameters that
    #   were not used in producing loss. (pytorch/pytorch#43259)
    # >= 1.9 adds:  Parameter indices which did not receive grad for rank 0: 2 217 394
    # DEBUG=INFO:   Parameters which did not receive grad for rank 0: head.bias, head.weight
    # static_graph: "... your training graph has changed in this iteration"
    Pattern(
        "DDP501",
        "ddp-unused-parameters",
        ("Expected to have finished reduction in the prior iteration", "did not receive grad"),
        "[rank {rank}: ]some parameters got no gradient in an iteration[ (indices "
        "{param_indices})][: {param_names}]",
        fields={
            "rank": (r"did not receive grad for rank (\d+)",),
            "param_indices": (
                r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)",
            ),
            "param_names": (r"Parameters which did not receive grad for rank \d+: (.+)$",),
        },
    ),
    # all versions: RuntimeError: Expected to mark a variable ready only once. ...
    # >= 1.9:       Parameter at index 192 with name blocks.11.mlp.fc2.weight has been marked
    #               as ready twice. (the name needs TORCH_DISTRIBUTED_DEBUG=INFO before 2.0)
    Pattern(
        "DDP502",
        "param-marked-ready-twice",
        ("marked as ready twice", "Expected to mark a variable ready only once"),
        "a parameter's gradient was produced twice in one backward[: index {param_index}][ "
        "({param_name})]",
        fields={
            "param_index": (r"Parameter at index (\d+)",),
            "param_name": (r"with name (\S+) has been marked",),
        },
    ),
    # slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1234.0. Some of your processes
    #   may have been killed by the cgroup out-of-memory handler.
    # kernel: Out of memory: Killed process 12345 (python) total-vm:... (< 5.x: "Kill process")
    # DataLoader: RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed.
    Pattern(
        "DDP504",
        "host-out-of-memory",
        ("oom-kill event", "Out of memory: Kill", "is killed by signal: Killed"),
        "the host ran out of memory and the kernel killed a process[ (pid {pid})]",
        fields={"pid": (r"Kill(?:ed)? process (\d+)", r"worker \(pid (\d+)\)")},
    ),
    # 1.x:       RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; ...)
    # 2.0 - 2.4: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
    #            GPU 0 has a total capacity of 79.11 GiB of which ...
    # >= 2.5:    torch.OutOfMemoryError: CUDA out of memory. ...
    # context:   RuntimeError: CUDA error: out of memory
    Pattern(
        "DDP505",
        "cuda-out-of-memory",
        ("CUDA out of memory", "CUDA error: out of memory"),
        "[rank {rank}: ]a GPU ran out of memory[ on GPU {gpu}][ allocating {requested}]",
        fields={"gpu": (r"\bGPU (\d+)",), "requested": (r"Tried to allocate ([\d.]+ [KMGT]?i?B)",)},
    ),
    # RuntimeError: CUDA error: device-side assert triggered (all versions); the kernel's own
    # line names the assertion: ... Assertion `t >= 0 && t < n_classes` failed.
    Pattern(
        "DDP506",
        "cuda-device-assert",
        ("device-side assert triggered",),
        "[rank {rank}: ]a CUDA kernel assertion failed (device-side assert)",
    ),
    # SLURM: slurmstepd: error: *** JOB 1234 ON node01 CANCELLED AT 2024-05-01T10:00:00 DUE TO
    #        TIME LIMIT ***   (scancel: no "DUE TO"; preemption: DUE TO PREEMPTION)
    # torchrun 1.x: Received 15 death signal, shutting down workers
    #          2.x: Received Signals.SIGTERM death signal, shutting down workers
    Pattern(
        "DDP507",
        "job-cancelled",
        ("CANCELLED AT", "death signal, shutting down workers"),
        "the job was stopped from outside[ ({reason})][ (torchrun got {signal})]",
        fields={
            "reason": (r"DUE TO ([A-Z ]+?)\s*\*\*\*",),
            "signal": (r"Received (?:Signals\.)?(SIG\w+|\d+) death signal",),
        },
    ),
    # A generic ncclSystemError: its cause is in the NCCL WARN lines before it (an interface,
    # /dev/shm, a peer that died), so it is reported as a symptom of its own.
    # 1.x: RuntimeError: NCCL error in: .../ProcessGroupNCCL.cpp:825, unhandled system error,
    #      NCCL version 2.7.8
    # 2.x: torch.distributed.DistBackendError: NCCL error in: .../NCCLUtils.hpp:219, unhandled
    #      system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3
    Pattern(
        "DDP508",
        "nccl-system-error",
        ("unhandled system error",),
        "NCCL failed a system call ('unhandled system error'[, NCCL {nccl_version}])",
        fields={"nccl_version": (r"NCCL version ([\w.+-]+)",)},
        role=Role.SYMPTOM,
    ),
    # --- generic, last ------------------------------------------------------------------------
    # host:pid:tid [dev] file.cc:NN NCCL WARN <message> (NCCL_DEBUG=WARN or INFO)
    Pattern(
        "DDP503",
        "nccl-warning",
        ("NCCL WARN",),
        "NCCL printed warnings: {message}",
        fields={"message": (r"NCCL WARN\s*(.+)$",)},
        role=Role.NOTE,
        collect=("message",),
    ),
)

# torchrun's ChildFailedError summary (torchrun_block.py): its root cause, found by these
# lines, is the strongest DDP307 hit (priority 3) and names the rank that failed first.
BLOCK_STARTS: tuple[str, ...] = ("ChildFailedError", "Root Cause")
ROOT_CAUSE_PATTERN = Pattern(
    "DDP307",
    "rank-crashed",
    BLOCK_STARTS,
    "rank {rank}[ (local rank {local_rank})][ on {host}] failed first (torchrun's root cause): "
    "exit code {exitcode}[ ({signal})]",
    role_of=_crash_role,
    priority=3,
)
# A DDP307 whose signal says more than the code's general fix.
ROOT_CAUSE_FIXES: dict[str, Remediation] = {"SIGKILL": _OOM_FIX}


def all_anchors() -> tuple[str, ...]:
    return tuple(anchor for pattern in PATTERNS for anchor in pattern.anchors) + BLOCK_STARTS
