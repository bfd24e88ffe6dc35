"""DDP501-DDP510: problems only a log shows (no probe or script rule measures them).

Registered on import of `ddp_doctor.logscan`; the pattern table (patterns.py) emits them.
"""

from __future__ import annotations

from ddp_doctor.model import Remediation
from ddp_doctor.registry import describe

describe(
    "DDP501",
    Remediation(
        "Make every parameter take part in the loss, or wrap with "
        "DistributedDataParallel(model, find_unused_parameters=True) (slower: it walks the "
        "graph each step). Freeze parameters that never train (requires_grad=False). Set "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL to print the unused parameters' names.",
        ("TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node=N train.py",),
    ),
    """What it finds: "Expected to have finished reduction in the prior iteration before starting a
new one", with the indices (or names) of the parameters "which did not receive grad".
Why it matters: DDP waits for every parameter's gradient before it all-reduces; a parameter
that took no part in the loss (an unused head, a branch not taken) leaves the reduction
unfinished and the next forward raises on that rank, and the others then hang.
Example: a model returns two heads but the loss uses one; a layer is skipped on some batches.
Fix: use every output in the loss or freeze what does not train; otherwise pass
find_unused_parameters=True (or static_graph=True when the unused set never changes).""",
)

describe(
    "DDP502",
    Remediation(
        "Use torch.utils.checkpoint.checkpoint(..., use_reentrant=False), or "
        "DistributedDataParallel(..., static_graph=True) when the graph is the same every "
        "iteration; do not run a shared module through two reentrant backward passes.",
    ),
    """What it finds: "Expected to mark a variable ready only once" / "Parameter at index N with
name X has been marked as ready twice".
Why it matters: DDP reduces each parameter once per iteration; a second gradient for the same
parameter breaks its bookkeeping and the backward raises.
Example: reentrant activation checkpointing (the default use_reentrant=True, or Hugging Face
gradient_checkpointing_enable() without kwargs) on a DDP model, or a module used twice with
find_unused_parameters=True (the static rule DDP126 finds the checkpoint case in a script).
Fix: use_reentrant=False, or static_graph=True when the graph does not change.""",
)

describe(
    "DDP503",
    Remediation(
        "Read the NCCL WARN lines: they name the call that failed (socket connect, shared "
        "memory, IB verbs, CUDA). Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for "
        "the setup steps around it.",
        ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET torchrun --nproc-per-node=N train.py",),
    ),
    """What it finds: lines with "NCCL WARN" (NCCL_DEBUG=WARN or INFO); the distinct messages are
kept in the evidence.
Why it matters: NCCL reports the failing system call only there; torch's exception says just
"unhandled system error" or "internal error".
Example: `NCCL WARN socketStartConnect: Connect to 10.0.0.2<43433> failed : Software caused
connection abort`, `NCCL WARN NET/IB : Got completion from peer ... with error 12`.
Fix: follow the message: an interface (NCCL_SOCKET_IFNAME), a firewall, IB settings
(NCCL_IB_DISABLE=1 to bisect), a peer that died first.""",
)

describe(
    "DDP504",
    Remediation(
        "Use less host RAM per node: fewer DataLoader workers (num_workers) and a smaller "
        "prefetch_factor, load the dataset lazily instead of into every rank, load checkpoints "
        "with mmap=True; or request more memory (SLURM --mem).",
        ("dmesg -T | grep -i -E 'killed process|out of memory'",),
    ),
    """What it finds: slurmstepd's "Detected N oom-kill event(s)" and srun's "task N: Out Of
Memory", LSF's "TERM_MEMLIMIT", PBS's "job killed: mem ... exceeded limit", the kernel's "Out
of memory: Killed process N" (and its memory cgroup's), the kubelet's "OOMKilled", "System OOM
encountered" and "The node was low on resource: memory", a container runtime's "container init
was OOM-killed", Ray's memory monitor (its kill message, its threshold lines, its out-of-memory
advice alone).
Why it matters: a killed rank leaves the others hanging until their timeout; torchrun then
reports exitcode -9 (SIGKILL), and DataLoader "worker ... is killed by signal: Killed", which
say nothing about memory by themselves: a SIGKILL with none of these lines is DDP307 (the
rank's or worker's death, naming the signal), and one with them is this.
Example: eight ranks each loading a 40 GB dataset into RAM, each with 8 DataLoader workers.
Fix: less RAM per rank (workers, prefetch, lazy or memory-mapped data), or more memory.""",
)

describe(
    "DDP505",
    Remediation(
        "Lower the per-GPU batch size (keep the global batch with gradient accumulation), use "
        "mixed precision and activation checkpointing; check that no other process holds "
        "the GPU (nvidia-smi) and that ranks do not all allocate on cuda:0.",
        ("nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv",),
    ),
    """What it finds: "CUDA out of memory. Tried to allocate ..." (torch.OutOfMemoryError) and
"CUDA error: out of memory", with the GPU index and the request size; NCCL's own "NCCL WARN
Cuda failure 'out of memory'" (its buffers; with memory free, its cuMem/NVLS path) and "Failed
to CUDA malloc/calloc N bytes", cuBLAS's CUBLAS_STATUS_ALLOC_FAILED and ROCm's "HIP out of
memory".
Why it matters: the rank that raised dies and the others hang in their next collective; in
DDP the cause is often not the model but a second context on GPU 0 (DDP403) or one rank doing
extra work (DDP404).
Example: `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a
total capacity of 79.11 GiB of which 1.20 GiB is free.`
Fix: smaller per-GPU batch with gradient accumulation, mixed precision, checkpointing; one
process per GPU.""",
)

describe(
    "DDP506",
    Remediation(
        "Rerun with CUDA_LAUNCH_BLOCKING=1 to get the failing line; the usual cause is an "
        "index out of range (a label >= num_classes, a token id >= vocab size).",
        ("CUDA_LAUNCH_BLOCKING=1 torchrun --nproc-per-node=N train.py",),
    ),
    """What it finds: "CUDA error: device-side assert triggered" and the kernel's "Assertion ...
failed" line.
Why it matters: the CUDA context is unusable afterwards; the rank dies and, because kernels
run asynchronously, the Python traceback often points at an unrelated later line.
Example: cross-entropy with a target class 10 and 10 classes; an embedding lookup past the
vocabulary.
Fix: CUDA_LAUNCH_BLOCKING=1 (or run the step on CPU) to find the line, then fix the index.""",
)

describe(
    "DDP507",
    Remediation(
        "The run was stopped from outside. A time limit: raise it (SLURM --time) or checkpoint "
        "and resume. SIGHUP: the terminal closed; run inside tmux/screen or with setsid. "
        "Otherwise find who cancelled it (sacct -j JOBID).",
        ("sacct -j JOBID --format=JobID,State,Elapsed,Timelimit,ExitCode",),
    ),
    """What it finds: SLURM's "CANCELLED AT ... DUE TO TIME LIMIT" (or PREEMPTION, or none for
scancel), LSF's "TERM_RUNLIMIT" (TERM_PREEMPT, TERM_OWNER, TERM_ADMIN), PBS's "job killed:
walltime ... exceeded limit" and Moab's "job exceeded wallclock limit", torchrun's "Received
SIGTERM (SIGHUP, SIGINT) death signal, shutting down workers" and its "SignalException: Process
N got signal: 15", srun's "Node failure on", and the kubelet's evictions for disk or a node
shutdown. torchrun's SIGTERM with none of the scheduler's lines is a warning: it shows that
something outside stopped the run (a scheduler, an orchestrator after another process failed,
a user's kill), not who or why.
Why it matters: the ranks' errors that follow (SIGTERM, exitcode -15, closed connections) are
consequences, not bugs in the script; a failure the log shows before the stop (a collective
timeout, a crash) is not, and is reported first.
Example: `slurmstepd: error: *** JOB 4242 ON node01 CANCELLED AT 2026-05-01T10:00:00 DUE TO
TIME LIMIT ***`; `Received Signals.SIGHUP death signal` after an SSH session closed.
Fix: a longer time limit and regular checkpoints; tmux, screen or setsid for interactive
launches.""",
)

describe(
    "DDP508",
    Remediation(
        "Rerun with NCCL_DEBUG=WARN (or INFO): the NCCL WARN line before the error names the "
        "failing call. Usual causes: the wrong network interface (set NCCL_SOCKET_IFNAME, "
        "DDP205), a small /dev/shm in a container (DDP008), a peer rank that died first.",
        ("NCCL_DEBUG=WARN torchrun --nproc-per-node=N train.py",),
    ),
    """What it finds: "NCCL error in: ..., unhandled system error" (ncclSystemError).
Why it matters: it is NCCL's catch-all for a failed socket, shared memory or device call; the
fix depends on which, and only NCCL's own WARN lines say it.
Example: `torch.distributed.DistBackendError: NCCL error in: .../NCCLUtils.hpp:219, unhandled
system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3`.
Fix: rerun with NCCL_DEBUG=WARN and follow the WARN line: NCCL_SOCKET_IFNAME for an interface,
a larger /dev/shm, or the rank that crashed first.""",
)

describe(
    "DDP509",
    Remediation(
        "Put the model and every tensor it meets on one device: model.to(device) before "
        "wrapping, inputs and targets .to(device) in the loop, new tensors created with "
        "device=x.device. With one process per GPU the device is cuda:LOCAL_RANK for "
        "everything (torch.cuda.set_device(local_rank) first); under nn.DataParallel it is "
        "device_ids[0] for the model, the inputs and the targets.",
    ),
    """What it finds: "Expected all tensors to be on the same device, but found at least two
devices, cuda:1 and cuda:0!" and its other wordings ("but got mat1 is on cuda:1, different
from other tensors on cuda:0"; torch <= 1.7 "Expected object of device type cuda but got
device type cpu"; RNNs' "Input and parameter tensors are not at the same device"; convs'
"Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same").
Why it matters: the step fails on its first batch; in multi-GPU code the usual cause is a
tensor sent to a fixed GPU (cuda:0, .cuda() with no index) or left on the CPU.
Example: nn.DataParallel with the targets sent to cuda:1 while outputs are gathered on cuda:0;
a DDP rank on cuda:3 building a mask with torch.ones(n).cuda().
Fix: one device per process for everything; under DataParallel, device_ids[0].""",
)

describe(
    "DDP510",
    Remediation(
        "The replica's own error (replica_error in the evidence) is the problem: fix it as on "
        "one GPU. Errors that appear only under nn.DataParallel come from forward code that "
        "assumes one device or one call: tensors created on a fixed device instead of x.device, "
        "state kept on self across calls (replicas are fresh copies every step), a batch "
        "smaller than the number of GPUs.",
    ),
    """What it finds: "Caught RuntimeError in replica 1 on device 1." and the replica's own
error at the end of the "Original Traceback" below it, which the finding carries.
Why it matters: DataParallel runs forward on a copy of the model per GPU in threads and
re-raises a replica's exception wrapped; the wrapper's line names only where it happened.
Example: `RuntimeError: Caught RuntimeError in replica 1 on device 1.` ... `RuntimeError:
Expected all tensors to be on the same device, but found at least two devices, cuda:1 and
cuda:0!` from a tensor made with .to("cuda:0") inside forward.
Fix: the replica's error; for device errors, create tensors on the input's device.""",
)
