"""Log texts of the install, the platform and devices, and the launch (DDP0xx, DDP1xx)."""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern, Role
from ddp_doctor.model import Remediation, Severity

PLATFORM_PATTERNS: tuple[Pattern, ...] = (
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
            # CUDA runtime errors of a driver older than the toolkit: cudaErrorInsufficient
            #   Driver; cudaErrorUnsupportedPtxVersion "the provided PTX was compiled with an
            #   unsupported toolchain"; 804 cudaErrorCompatNotSupportedOnDevice "forward
            #   compatibility was attempted on non supported HW" (a compat libcuda on a GPU
            #   that cannot use it)
            "cudaErrorInsufficientDriver",
            "compiled with an unsupported toolchain",
            "forward compatibility was attempted on non supported HW",
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
        (
            "no kernel image is available",
            "is not compatible with the current PyTorch installation",
            # the warning's source line, which Python prints under it (torch/cuda/__init__.py)
            "warn(incompatible_device_warn.format(",
            # the runtime's name (its "invalid device function": the row below, with its fix)
            "cudaErrorNoKernelImageForDevice",
        ),
        "this torch build has no kernels for the GPU[ ({arch})]",
        fields={
            "arch": (r"CUDA capability (sm_\d+)",),
            "gpu": (r"([\w() -]+?) with CUDA capability",),
        },
    ),
    # CUDA's cudaErrorInvalidDeviceFunction, a kernel with no image for this GPU: "RuntimeError:
    #   CUDA error: invalid device function" (weiyithu/SurroundOcc#100, an mmcv build), 0.x - 1.x
    #   "cuda runtime error (8) : invalid device function" (pytorch/pytorch#1557: built on
    #   another node; peterjc123/pytorch-scripts#18: a wheel without the card's sm_5x), custom
    #   kernels' "cudaCheckError() failed : invalid device function" (CharlesShang/TFFRCNN#45)
    Pattern(
        "DDP004",
        "gpu-arch-unsupported",
        ("invalid device function",),
        "a CUDA kernel has no image for this GPU ('invalid device function'): torch or a compiled "
        "extension (mmcv, apex, a custom op) was built without the GPU's architecture",
        confirm=r"(?i)cuda|THCudaCheck|error",
        fix=Remediation(
            "Rebuild the extension for this GPU (TORCH_CUDA_ARCH_LIST set to its compute "
            "capability, e.g. '8.6', on the machine type that runs it), or install a torch wheel "
            "and extension packages built for the architecture.",
            ('python -c "import torch; print(torch.cuda.get_device_capability())"',),
        ),
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
        ("use_libuv was requested",),
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
            "posix_fallocate failed",  # NCCL <= 2.11 include/shm.h (NVIDIA/nccl#290, #342)
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
    # NCCL 2.28 (misc/shmutils.cc): "Error: failed to create shared memory file /dev/shm/nccl-
    #   Ab12Cd, error No space left on device (28)"; a file it may not create is the
    #   shm-not-writable hint's case, so only a full /dev/shm counts here
    Pattern(
        "DDP008",
        "dev-shm-too-small",
        ("failed to create shared memory file",),
        "shared memory (/dev/shm) ran out[ creating {shm_path}]",
        fields={"shm_path": (r"(/dev/shm/[\w.-]+)",)},
        confirm=r"No space left on device",
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
    # CUDA error: all CUDA-capable devices are busy or unavailable (pytorch/pytorch#3871); CUDA
    #   >= 11: "CUDA-capable device(s) is/are busy or unavailable" (NVIDIA/nvidia-resiliency-ext#18)
    Pattern(
        "DDP024",
        "exclusive-compute-mode",
        # CUDA <= 10: "CUDA-capable device(s) is/are busy or unavailable"; the runtime's name
        (
            "devices are busy or unavailable",
            "is/are busy or unavailable",
            "cudaErrorDevicesUnavailable",
        ),
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
)
