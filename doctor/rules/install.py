"""DDP001-DDP010: the torch build, the driver, NCCL and the platform."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet, parse_major_minor
from ddp_doctor.model import Remediation, Severity
from ddp_doctor.readings.python_choice import chosen_line, pick_another_python, torch_missing_here
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.common import gpu_present, visible_capabilities

GIB = 1024**3
PYTORCH_INSTALL_PAGE = "https://pytorch.org/get-started/locally/"
# NCCL_* names that torch reads under a TORCH_NCCL_* name since 2.2 (ProcessGroupNCCL.hpp).
RENAMED_NCCL_VARIABLES = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
    "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
}


@rule(
    "DDP001",
    Remediation(
        "Reinstall torch for this machine's CUDA driver, in the environment you launch from "
        f"(the selector at {PYTORCH_INSTALL_PAGE} gives the command).",
        ("python -c 'import torch; print(torch.__version__)'",),
    ),
)
def torch_unusable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: `import torch` failing in a child process: not installed, a missing
    libcudart or libnccl, an ABI mismatch with another package.
    Why it matters: nothing distributed can start; torchrun fails on every rank.
    Example: `OSError: libcudart.so.12: cannot open shared object file`.
    Fix: reinstall torch for this driver in this environment; check `which python`. When the
    Python examined has no torch at all, the finding names it, why it was chosen, and the
    environments with torch found (`--python` or an activation for each).
    """
    torch, python = facts.torch, facts.python
    if torch is None or torch.importable:
        return
    if python is not None and torch_missing_here(python):
        yield Hit(
            f"no torch in the Python examined: {chosen_line(python)}",
            {
                "error": torch.import_error,
                "python": python.executable,
                "chosen_by": python.chosen_by,
            },
            fix=pick_another_python(python, "This Python is not your training environment"),
        )
        return
    yield Hit(f"torch cannot be imported: {torch.import_error}", {"error": torch.import_error})


@rule(
    "DDP002",
    Remediation(
        "Install a CUDA build of torch that matches the driver (e.g. the cu126 or cu128 wheel), "
        f"not the +cpu one: see {PYTORCH_INSTALL_PAGE}.",
    ),
)
def cpu_only_torch_on_gpu_host(facts: FactSet) -> Iterator[Hit]:
    """What it finds: torch.version.cuda is None while NVML lists GPUs.
    Why it matters: every GPU call fails with "Torch not compiled with CUDA enabled"; NCCL is
    missing, so DDP can only use gloo on the CPU.
    Example: `pip install torch` resolved to a `+cpu` wheel from a CPU-only index.
    Fix: install the CUDA wheel that matches the driver.
    """
    torch, nvml = facts.torch, facts.nvml
    if torch and torch.importable and not torch.cuda_version and not torch.hip_version and nvml:
        yield Hit(
            f"torch {torch.version} is a CPU-only build, but NVML sees {len(nvml.gpus)} GPU(s)",
            {"torch": torch.version, "gpus": len(nvml.gpus)},
        )


@rule(
    "DDP003",
    Remediation(
        "Upgrade the NVIDIA driver to one that supports this CUDA version, or install a torch "
        "wheel built for an older CUDA (cuXY no newer than the driver's CUDA version).",
        ("nvidia-smi",),
    ),
)
def driver_too_old(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the driver's CUDA version (NVML) has a lower major version than
    torch.version.cuda, or torch reported "driver version is insufficient".
    Why it matters: CUDA fails to initialise; torch.cuda.is_available() is False.
    Example: driver 470 (CUDA 11.4) with a cu121 wheel.
    Fix: upgrade the driver, or pick the wheel for the driver's CUDA.
    """
    torch, nvml = facts.torch, facts.nvml
    if not torch or not torch.cuda_version:
        return
    runtime = parse_major_minor(torch.cuda_version)
    driver = parse_major_minor(nvml.cuda_driver_version) if nvml else None
    insufficient = "driver version is insufficient" in (torch.cuda_error or "")
    if insufficient or (runtime and driver and driver[0] < runtime[0]):
        driver_cuda = nvml.cuda_driver_version if nvml else "unknown"
        yield Hit(
            f"torch is built for CUDA {torch.cuda_version} but the driver supports CUDA "
            f"{driver_cuda}",
            {
                "torch_cuda": torch.cuda_version,
                "driver_cuda": driver_cuda,
                "driver": nvml.driver_version if nvml else None,
            },
        )


@rule(
    "DDP004",
    Remediation(
        "Install a torch wheel built for this GPU architecture (e.g. cu128 or newer for sm_120 "
        f"Blackwell cards): see {PYTORCH_INSTALL_PAGE}."
    ),
)
def gpu_arch_unsupported(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a device capability that no entry of torch.cuda.get_arch_list() can run
    on: `sm_XY` and `compute_XY` cover the same major version from minor Y up, as torch's own
    check counts them (Jetson capabilities only by their own entry).
    Why it matters: every kernel fails with "no kernel image is available for execution on the
    device"; torch warns "sm_120 is not compatible with the current PyTorch installation".
    Example: an RTX 5090 (sm_120) with a cu118 wheel.
    Fix: a wheel that lists the architecture.
    """
    torch = facts.torch
    if not torch or not torch.cuda_version or not torch.arch_list:
        return
    for index, name, capability in visible_capabilities(facts):
        if not _arch_covered(capability, torch.arch_list):
            sm = f"sm_{capability[0]}{capability[1]}"
            yield Hit(
                f"GPU {index} ({name}) is {sm}, which torch {torch.version} was not built for "
                f"(arch list: {' '.join(torch.arch_list)})",
                {"gpu": index, "capability": sm, "arch_list": list(torch.arch_list)},
            )


# Integrated (Jetson/Tegra) GPUs: code built for them runs only on them, and same-major code
# built for discrete GPUs does not run on them (torch.cuda.DEVICE_REQUIREMENT, torch 2.13).
INTEGRATED_GPUS = {53: {53}, 62: {62}, 72: {72}, 87: {87}, 101: {101, 110}}


def _arch_covered(capability: tuple[int, int], arch_list: tuple[str, ...]) -> bool:
    """As torch's own check: sm_XY and compute_XY run on the same major, minor >= Y."""
    device = capability[0] * 10 + capability[1]
    for arch in arch_list:
        digits = arch.partition("_")[2].rstrip("af")
        if not digits.isdigit():
            continue
        code = int(digits)
        if code in INTEGRATED_GPUS:
            if device in INTEGRATED_GPUS[code]:
                return True
        elif code // 10 == device // 10 and code <= device and device not in INTEGRATED_GPUS:
            return True
    return False


@rule(
    "DDP005",
    Remediation(
        'Use the gloo backend (init_process_group("gloo")) here; for GPU training install a '
        "Linux CUDA build of torch, on Windows through WSL2."
    ),
)
def nccl_unavailable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: dist.is_nccl_available() is False (Windows and macOS builds, CPU wheels).
    Why it matters: `init_process_group("nccl")` fails with "Distributed package doesn't have
    NCCL built in". An error where GPUs are present or nccl was asked for, else information.
    Example: a training script hard-coding backend="nccl" run on a Windows workstation.
    Fix: gloo here; a Linux CUDA build (or WSL2) for GPU training.
    """
    torch = facts.torch
    if not torch or not torch.importable or torch.nccl_available:
        return
    wanted = facts.plan.backend == "nccl"
    severity = Severity.ERROR if wanted or gpu_present(facts) else Severity.INFO
    reason = (
        "--backend nccl was asked for"
        if wanted
        else "GPUs are present"
        if severity is Severity.ERROR
        else "only gloo can be used"
    )
    yield Hit(
        f"torch {torch.version} has no NCCL ({reason})",
        {"torch": torch.version, "backend_requested": facts.plan.backend},
        severity=severity,
    )


@rule(
    "DDP006",
    Remediation(
        "Set USE_LIBUV=0 before launching, or add ?use_libuv=0 to the init_method URL.",
        ("set USE_LIBUV=0",),
    ),
)
def windows_libuv_store(facts: FactSet) -> Iterator[Hit]:
    """What it finds: Windows, torch >= 2.4 and USE_LIBUV unset.
    Why it matters: init fails with "use_libuv was requested but PyTorch was build without
    libuv support".
    Example: `torchrun --nproc-per-node 2 train.py` in a Windows terminal.
    Fix: `set USE_LIBUV=0`, or `?use_libuv=0` in the init_method URL.
    """
    host, torch = facts.host, facts.torch
    if not host or host.system != "Windows" or not torch or not torch.major_minor:
        return
    if torch.major_minor >= (2, 4) and facts.env.get("USE_LIBUV") is None:
        yield Hit(
            f"Windows with torch {torch.version} and USE_LIBUV unset", {"torch": torch.version}
        )


@rule(
    "DDP007",
    Remediation(
        "Use MASTER_ADDR=127.0.0.1 and gloo for single-machine runs; for real multi-GPU or "
        "multi-node training use Linux or WSL2."
    ),
)
def windows_gloo_limits(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the Windows platform.
    Why it matters: no NCCL; gloo has no all_to_all and no GPU send/recv on Windows, and host
    name resolution fails with "unsupported gloo device".
    Example: a script that calls all_to_all_single works on Linux and fails on Windows.
    Fix: 127.0.0.1 and gloo here; Linux or WSL2 for real runs.
    """
    if facts.host and facts.host.system == "Windows":
        yield Hit("Windows: gloo only, without all_to_all or GPU send/recv", {})


@rule(
    "DDP008",
    Remediation(
        "In a container: docker run --ipc=host (or --shm-size=16g); on Kubernetes mount an "
        "emptyDir with medium: Memory at /dev/shm. On a host, remount /dev/shm larger.",
        ("df -h /dev/shm",),
    ),
)
def dev_shm_too_small(facts: FactSet) -> Iterator[Hit]:
    """What it finds: statvfs('/dev/shm') below 1 GiB (Docker's default is 64 MiB).
    Why it matters: NCCL fails with "Error while creating shared memory segment", DataLoader
    workers die with "bus error ... insufficient shared memory".
    Example: `docker run --gpus all image torchrun ...` without --ipc=host.
    Fix: --ipc=host or --shm-size in a container; remount larger on a host.
    """
    host = facts.host
    if host and host.shm_total_bytes is not None and host.shm_total_bytes < GIB:
        where = f" in a {host.container} container" if host.container else ""
        yield Hit(
            f"/dev/shm is {host.shm_total_bytes / 1024**2:.0f} MiB{where}; NCCL and DataLoader "
            "workers need more",
            {"shm_bytes": host.shm_total_bytes, "container": host.container},
        )


@rule(
    "DDP009",
    Remediation("Use the TORCH_NCCL_* name; torch >= 2.2 reads the old name only as a fallback."),
)
def deprecated_nccl_env(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NCCL_ASYNC_ERROR_HANDLING, NCCL_BLOCKING_WAIT, NCCL_DESYNC_DEBUG,
    NCCL_ENABLE_TIMING set in the environment.
    Why it matters: torch warns on every rank, and the old names are going away; a value set
    under both names is ambiguous.
    Example: `export NCCL_ASYNC_ERROR_HANDLING=1` from an old recipe.
    Fix: rename to TORCH_NCCL_ASYNC_ERROR_HANDLING (and so on).
    """
    for old, new in RENAMED_NCCL_VARIABLES.items():
        value = facts.env.get(old)
        if value is not None:
            yield Hit(
                f"{old}={value} is deprecated; torch reads {new}",
                {"variable": old, "value": value, "replacement": new},
                fix=Remediation(
                    f"Rename {old} to {new}.", (f"unset {old}", f"export {new}={value}")
                ),
            )


@rule(
    "DDP010",
    Remediation(
        "Put the training code in a script and launch it with torchrun from a terminal; in a "
        "notebook use only single-process code (or a launcher built for notebooks)."
    ),
)
def jupyter_launch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the doctor running inside, or launched from, an IPython kernel.
    Why it matters: mp.spawn cannot pickle notebook-defined functions, CUDA initialised in the
    kernel breaks forked workers, and a failed rank leaves the kernel hung.
    Example: calling mp.spawn(train, nprocs=2) in a notebook cell.
    Fix: a script launched with torchrun.
    """
    if facts.host and facts.host.jupyter_kernel:
        yield Hit("running inside a Jupyter kernel", {})
