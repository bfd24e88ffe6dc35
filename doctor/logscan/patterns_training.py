"""Log texts of training itself: DDP's reducer, memory, devices, and nn.DataParallel (DDP5xx,
DDP109/DDP125/DDP405 in their DataParallel form)."""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Evidence, Pattern, Role
from ddp_doctor.model import Remediation

DATAPARALLEL_DEVICE_FIX = Remediation(
    "Under nn.DataParallel send inputs and targets to device_ids[0] (e.g. x.to('cuda:0')): the "
    "wrapper scatters them to the other GPUs and gathers the outputs on output_device "
    "(device_ids[0] by default), so compute the loss there. Inside forward, create tensors on "
    "the input's device (torch.zeros(..., device=x.device)), never on a fixed 'cuda:0' or the "
    "CPU.",
)


def _replica_role(evidence: Evidence) -> Role:
    """The replica's own error is the cause; when it is a known text, that finding leads."""
    return Role.SYMPTOM if evidence.get("replica_error_code") else Role.CAUSE


TRAINING_PATTERNS: tuple[Pattern, ...] = (
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
    # kernel, a cgroup's limit: "Memory cgroup out of memory: Killed process 15617 (python3)"
    #   (docker/for-linux#1001; < 5.x "... Kill process 19302 (java) score 1337 or sacrifice
    #   child", microsoft/pai#1682); its report's first lines: "uwsgi invoked oom-killer:
    #   gfp_mask=..." (reportportal/kubernetes#203), "oom-kill:constraint=CONSTRAINT_NONE,...,
    #   task=python,pid=7899" (0jc1/py-autovod#7)
    # (a DataLoader worker "killed by signal: Killed" is a SIGKILL, not memory evidence by itself:
    #  patterns_ranks.py)
    Pattern(
        "DDP504",
        "host-out-of-memory",
        (
            "oom-kill event",
            "Out of memory: Kill",
            "cgroup out of memory: Kill",
            "invoked oom-killer",
            "oom-kill:constraint=",
        ),
        "the host ran out of memory and the kernel killed a process[ (pid {pid})]",
        fields={"pid": (r"Kill(?:ed)? process (\d+)", r"oom-kill:.*\bpid=(\d+)")},
    ),
    # 1.x:       RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; ...)
    # 2.0 - 2.4: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
    #            GPU 0 has a total capacity of 79.11 GiB of which ...
    # >= 2.5:    torch.OutOfMemoryError: CUDA out of memory. ...
    # context:   RuntimeError: CUDA error: out of memory
    Pattern(
        "DDP505",
        "cuda-out-of-memory",
        # NCCL (include/checks.h, alloc.h): "NCCL WARN Cuda failure 'out of memory'" (2.4 -
        #   2.18), "Cuda failure 2 'out of memory'" (>= 2.19), "Failed to CUDA calloc async
        #   4194304 bytes"; torch's driver API: "CUDA driver error: out of memory"; cuBLAS
        #   creating its handle: "CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
        #   (pytorch/pytorch#40377); ROCm builds: "HIP out of memory. Tried to allocate";
        #   the runtime's name: cudaErrorMemoryAllocation
        (
            "CUDA out of memory",
            "CUDA error: out of memory",
            # torch <= 1.0 (THC): "cuda runtime error (2) : out of memory at .../THCStorage.cu:58"
            "cuda runtime error (2) : out of memory",
            "CUDA driver error: out of memory",
            # (NCCL's "Cuda failure 'out of memory'": patterns_cluster.py, with its own fix)
            "Cuda failure 2 'out of memory'",
            "Failed to CUDA calloc",
            "Failed to CUDA malloc",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "HIP out of memory. Tried",
            "cudaErrorMemoryAllocation",
        ),
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
    # The kernel's own line, often pasted without the RuntimeError after it (one per thread):
    #   .../THCTensorIndex.cu:218: block: [0,0,0], thread: [106,0,0] Assertion `srcIndex <
    #   srcSelectDimSize` failed.   (NVIDIA/flowtron#52; >= 1.13: .../Indexing.cu:1146:
    #   indexSelectLargeIndex: block: [..], thread: [..] Assertion `...` failed.)
    Pattern(
        "DDP506",
        "cuda-device-assert",
        ("] Assertion `",),
        "[rank {rank}: ]a CUDA kernel assertion failed (device-side assert)[: {assertion}]",
        fields={"assertion": (r"Assertion `(.{1,120}?)` failed",)},
        confirm=r"thread: \[\d+,\s*\d+,\s*\d+\] Assertion `",
    ),
    # SLURM: slurmstepd: error: *** JOB 1234 ON node01 CANCELLED AT 2024-05-01T10:00:00 DUE TO
    #        TIME LIMIT ***   (scancel: no "DUE TO"; preemption: DUE TO PREEMPTION)
    # torchrun 1.x: Received 15 death signal, shutting down workers
    #          2.x: Received Signals.SIGTERM death signal, shutting down workers
    Pattern(
        "DDP507",
        "job-cancelled",
        # torchrun's agent raising on SIGTERM/SIGINT/SIGHUP/SIGQUIT (elastic/multiprocessing/
        #   api.py): "torch.distributed.elastic.multiprocessing.api.SignalException: Process
        #   12345 got signal: 15"
        ("CANCELLED AT", "death signal, shutting down workers", "SignalException: Process"),
        "the job was stopped from outside[ ({reason})][ (torchrun got {signal})]",
        fields={
            "reason": (r"DUE TO ([A-Z ]+?)\s*\*\*\*",),
            "signal": (
                r"Received (?:Signals\.)?(SIG\w+|\d+) death signal",
                r"got signal: (SIG\w+|\d+)",
            ),
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
        # torch >= 2.0 adds its own description (NCCLUtils): "ncclSystemError: System call
        #   (e.g. socket, malloc) or external library call failed or device error."; NCCL 2.28's
        #   string for it is "System error"
        (
            "unhandled system error",
            "unhanled system error",  # 1.1's typo (pytorch#23363)
            "ncclSystemError: System call",
        ),
        "NCCL failed a system call ('unhandled system error'[, NCCL {nccl_version}])",
        fields={"nccl_version": (r"NCCL version ([\w.+-]+)",)},
        role=Role.SYMPTOM,
    ),
    # --- nn.DataParallel (torch/nn/parallel, every version since 1.1) -------------------------
    # data_parallel.py: RuntimeError: module must have its parameters and buffers on device
    #   cuda:0 (device_ids[0]) but found one of them on device: cpu
    Pattern(
        "DDP109",
        "model-not-on-device",
        ("module must have its parameters and buffers on device",),
        "nn.DataParallel's model still has parameters or buffers on {found}, not on the "
        "first of device_ids ({expected}): the model was wrapped before it was moved",
        fields={
            "expected": (r"on device (\S+) \(device_ids\[0\]\)",),
            "found": (r"on device: (\S+?)\.?$",),
        },
        confirm=r"found one of them on device: cpu",
        fix=Remediation(
            "Move the model to the wrapper's first device before wrapping: "
            "model.to('cuda:0') (the device of device_ids[0]; with CUDA_VISIBLE_DEVICES, the "
            "first visible GPU), then nn.DataParallel(model, device_ids=[0, 1, ...]). A tensor "
            "kept as a plain attribute is not moved with the model: register it with "
            "register_buffer.",
        ),
    ),
    # ... but found one of them on device: cuda:1 -> the model sits on another GPU
    Pattern(
        "DDP405",
        "dp-output-device-mismatch",
        ("module must have its parameters and buffers on device",),
        "nn.DataParallel's model is on {found} but the first of device_ids is {expected}",
        fields={
            "expected": (r"on device (\S+) \(device_ids\[0\]\)",),
            "found": (r"on device: (\S+?)\.?$",),
        },
        fix=Remediation(
            "device_ids[0] must be the GPU the model is on: move the model there before "
            "wrapping (model.to(f'cuda:{device_ids[0]}')), or list the model's GPU first "
            "(device_ids=[1, 0] for a model on cuda:1), and keep output_device where the loss "
            "is computed.",
        ),
    ),
    # >= 1.8:  Expected all tensors to be on the same device, but found at least two devices,
    #          cuda:1 and cuda:0!  (>= 1.13 adds "(when checking argument for argument mat1 in
    #          method wrapper_addmm)")
    # >= 2.6:  Expected all tensors to be on the same device, but got mat1 is on cuda:1,
    #          different from other tensors on cuda:0 (when checking argument in method ...)
    # CPU ops: Expected all tensors to be on the same device. addmm: expected 'mat1' to be a
    #          CPU tensor, but got tensor on cuda:0
    # <= 1.7:  Expected tensor for argument #1 'input' to have the same device as tensor for
    #          argument #2 'weight'; but device 1 does not equal 0 / Expected object of device
    #          type cuda but got device type cpu for argument #1 'self' in call to _th_addmm
    # RNNs:    Input and parameter tensors are not at the same device, found input tensor at
    #          cuda:1 and parameter tensor at cuda:0
    # conv:    Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should
    #          be the same
    Pattern(
        "DDP509",
        "tensors-on-different-devices",
        (
            "Expected all tensors to be on the same device",
            "to have the same device as tensor for argument",
            "Expected object of device type",
            "Expected object of backend",
            "Input and parameter tensors are not at the same device",
            "and weight type (",
        ),
        "[rank {rank}: ]one operation got tensors on different devices[: {device_a} and "
        "{device_b}][ ({argument} in {method})]",
        fields={
            "device_a": (
                r"found at least two devices, (\S+?) and",
                r"but got \w+ is on (\S+?),",
                r"found input tensor at (\S+?) and",
                r"but got device type (\w+)",
                r"but device (\d+) does not equal",
                r"Input type \(([\w.]+)\)",
            ),
            "device_b": (
                r"found at least two devices, \S+? and (\S+?)!",
                r"different from other tensors on (\S+?)[ (.]",
                r"and parameter tensor at (\S+?)\b",
                r"Expected object of device type (\w+)",
                r"does not equal (\d+)",
                r"and weight type \(([\w.]+)\)",
            ),
            "argument": (r"argument (?:for argument )?(\w+) in method", r"argument #\d+ '(\w+)'"),
            "method": (r"in method (\w+)", r"in call to (\w+)", r"for (\w+)\)"),
        },
        confirm=(
            r"same device|device type|backend|cuda\.\w+\) and weight type \(torch\.(?!cuda)|"
            r"\(torch\.(?!cuda)\w+\) and weight type \(torch\.cuda"
        ),
    ),
    # torch/_utils.py ExceptionWrapper (>= 1.1): RuntimeError: Caught RuntimeError in replica 1
    # on device 1.  then "Original Traceback (most recent call last):", the replica's frames
    # and its own error (replica_block.py reads them). >= 2.1 also "in replica 0, no device
    # was provided and no tensor input was found; device cannot be resolved".
    Pattern(
        "DDP510",
        "dataparallel-replica-error",
        ("in replica ",),
        "replica {replica}[ on GPU {device}] raised {exc_type} inside nn.DataParallel[: "
        "{replica_error}]",
        fields={
            "exc_type": (r"Caught (\w+) in replica",),
            "replica": (r"in replica (\d+)",),
            "device": (r"in replica \d+ on device (\d+)",),
        },
        confirm=r"Caught \w+ in replica \d+",
        role_of=_replica_role,
    ),
    # nn/parallel/_functions.py (>= 0.4): UserWarning: Was asked to gather along dimension 0,
    # but all input tensors were scalars; will instead unsqueeze and return a vector.
    Pattern(
        "DDP125",
        "dataparallel-loss-not-reduced",
        ("all input tensors were scalars",),
        "nn.DataParallel gathered one scalar per GPU into a vector: the loss (or a metric) is "
        "computed inside forward and comes back unreduced",
        role=Role.NOTE,
        fix=Remediation(
            "Reduce what forward returns: loss = model(inputs).mean() (the gathered vector "
            "holds one loss per GPU), or return the outputs from forward and compute the loss "
            "outside the DataParallel wrapper.",
        ),
    ),
    # host:pid:tid [dev] file.cc:NN NCCL WARN <message> (NCCL_DEBUG=WARN or INFO)
    Pattern(
        "DDP503",
        "nccl-warning",
        # NCCL <= 2.3 wrote "include/socket.h:360 WARN Call to connect failed : ..." without
        # "NCCL" (NVIDIA/nccl-tests#15)
        ("NCCL WARN", " WARN Call to", " WARN Connection"),
        "NCCL printed warnings: {message}",
        fields={"message": (r"WARN\s*(.+)$",)},
        role=Role.NOTE,
        collect=("message",),
    ),
)
