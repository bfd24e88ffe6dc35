"""DDP020-DDP028: which GPUs the processes will see, and in what state they are."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation, Severity
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.common import env_count, gpu_present, plural, visible_devices

MEMORY_TAKEN_WARNING = 0.5
MEMORY_TAKEN_ERROR = 0.9


@rule(
    "DDP020",
    Remediation(
        "Set CUDA_VISIBLE_DEVICES to a comma-separated list of existing indices (counted in "
        "CUDA_DEVICE_ORDER) or of full GPU- UUIDs, without spaces or repeats; `nvidia-smi -L` "
        "lists both.",
        ("nvidia-smi -L",),
    ),
)
def cuda_visible_devices_invalid(facts: FactSet) -> Iterator[Hit]:
    """What it finds: an entry that is not an index or GPU-/MIG- UUID, an index past NVML's
    count, an unknown UUID, a repeated entry; and a value that hides every GPU on purpose
    (information).
    Why it matters: CUDA stops reading at the first bad entry and silently drops it and all
    after it (a repeat hides every GPU), so torch sees fewer GPUs than meant and ranks collide.
    Example: `CUDA_VISIBLE_DEVICES=0,abc` shows GPU 0 only; `0,1,8` on a 4-GPU node shows 2.
    Fix: list existing indices or UUIDs from `nvidia-smi -L`.
    """
    visible = visible_devices(facts)
    if visible.hides_all:
        if gpu_present(facts) or facts.nvml:
            yield Hit(
                f"CUDA_VISIBLE_DEVICES={visible.raw!r} hides every GPU from this process",
                {"value": visible.raw},
                severity=Severity.INFO,
            )
        return
    for problem in visible.problems:
        yield Hit(
            f"CUDA_VISIBLE_DEVICES={visible.raw!r}: {problem}",
            {"value": visible.raw, "problem": problem, "visible_count": visible.count},
        )


@rule(
    "DDP021",
    Remediation(
        "Set CUDA_VISIBLE_DEVICES in the shell before Python starts (not in code after torch "
        "is imported); in a container, check which GPUs were passed in (--gpus, device plugin).",
    ),
)
def device_count_mismatch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: torch counting a different number of GPUs than NVML's list filtered by
    CUDA_VISIBLE_DEVICES.
    Why it matters: one rank per GPU then starts the wrong number of ranks, or two land on one
    GPU; usually a variable set too late, or a container that mounts fewer devices than the
    driver reports.
    Example: NVML lists 8 GPUs, CUDA_VISIBLE_DEVICES=0,1,2,3, torch sees 8.
    Fix: set the variable before torch starts; check the container's GPU mounts.
    """
    torch, nvml = facts.torch, facts.nvml
    if not torch or not torch.cuda_version or not nvml or not torch.cuda_available:
        return
    visible = visible_devices(facts)
    if visible.problems or visible.mig_slices or any(gpu.mig_mode for gpu in visible.gpus):
        return  # DDP020 / DDP023 say why already (with MIG on, CUDA shows one slice)
    if torch.device_count != visible.count:
        yield Hit(
            f"torch sees {plural(torch.device_count, 'GPU')}, NVML {len(nvml.gpus)}, and "
            f"CUDA_VISIBLE_DEVICES={visible.raw!r} selects {visible.count}",
            {
                "torch": torch.device_count,
                "nvml": len(nvml.gpus),
                "visible": visible.count,
                "cuda_visible_devices": visible.raw,
            },
        )


@rule(
    "DDP022",
    Remediation(
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID so that torch's indices match nvidia-smi's.",
        ("export CUDA_DEVICE_ORDER=PCI_BUS_ID",),
    ),
)
def device_order_not_pci(facts: FactSet) -> Iterator[Hit]:
    """What it finds: more than one GPU model among the visible GPUs with CUDA_DEVICE_ORDER unset
    (CUDA then orders fastest first) or set to FASTEST_FIRST.
    Why it matters: cuda:0 in torch is not GPU 0 in nvidia-smi, so CUDA_VISIBLE_DEVICES and
    monitoring point at the wrong cards.
    Example: an RTX 4090 at PCI index 1 and an RTX 3060 at index 0: torch calls the 4090 cuda:0.
    Fix: CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    gpus = visible_devices(facts).gpus
    models = sorted({gpu.name for gpu in gpus})
    order = facts.env.get("CUDA_DEVICE_ORDER")
    if len(models) > 1 and order != "PCI_BUS_ID":
        yield Hit(
            f"GPUs of {len(models)} models ({', '.join(models)}) with CUDA_DEVICE_ORDER="
            f"{order or 'unset'}: torch's indices differ from nvidia-smi's",
            {"models": models, "cuda_device_order": order},
        )


@rule(
    "DDP023",
    Remediation(
        "Run one process per MIG slice as separate jobs, or disable MIG for DDP across whole "
        "GPUs (nvidia-smi -i N -mig 0, as root, with no processes on the GPU).",
        ("nvidia-smi -L",),
    ),
)
def mig_devices(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NVML MIG mode enabled on a GPU, or MIG- UUIDs in CUDA_VISIBLE_DEVICES.
    Why it matters: a process sees only one MIG slice, and NCCL cannot run collectives across
    slices, so DDP across slices fails or hangs.
    Example: an A100 split into 7 slices with torchrun --nproc-per-node 7.
    Fix: one slice per job, or whole GPUs.
    """
    visible = visible_devices(facts)
    if visible.mig_slices:
        yield Hit(
            f"CUDA_VISIBLE_DEVICES names {plural(len(visible.mig_slices), 'MIG slice')}",
            {"slices": list(visible.mig_slices)},
        )
        return
    enabled = [gpu.index for gpu in (facts.nvml.gpus if facts.nvml else ()) if gpu.mig_mode]
    if enabled:
        yield Hit(
            f"MIG is enabled on GPU {', '.join(map(str, enabled))}",
            {"gpus": enabled},
        )


@rule(
    "DDP024",
    Remediation(
        "Make sure each rank touches only its own GPU (set_device(local_rank) first, "
        "map_location on torch.load), or set the default mode: nvidia-smi -i N -c DEFAULT (root).",
    ),
)
def exclusive_compute_mode(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NVML compute mode other than default.
    Why it matters: a second context on the GPU (a stray one from another rank, a leftover
    job) fails with "all CUDA-capable devices are busy or unavailable"; prohibited allows none.
    Example: a cluster that sets EXCLUSIVE_PROCESS, and rank 1 creating a context on GPU 0.
    Fix: no stray contexts (DDP107, DDP118), or the default mode.
    """
    for gpu in visible_devices(facts).gpus:
        if gpu.compute_mode in ("exclusive-process", "exclusive-thread", "prohibited"):
            yield Hit(
                f"GPU {gpu.index} ({gpu.name}) is in {gpu.compute_mode} compute mode",
                {"gpu": gpu.index, "mode": gpu.compute_mode},
                severity=Severity.ERROR if gpu.compute_mode == "prohibited" else None,
            )


@rule(
    "DDP025",
    Remediation(
        "Drain the node and reset the GPU (nvidia-smi -r -i N, no processes on it); if errors "
        "return, replace it. Check `nvidia-smi -q -d ECC` and dmesg for Xid errors.",
        ("nvidia-smi -q -d ECC",),
    ),
)
def ecc_errors(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NVML volatile uncorrectable ECC count above zero.
    Why it matters: kernels fail with "uncorrectable ECC error encountered", or results are
    silently wrong; NCCL jobs die at random.
    Example: a GPU with a failing HBM stack in an 8-GPU node.
    Fix: drain, reset, replace if it comes back.
    """
    for gpu in visible_devices(facts).gpus:
        if gpu.ecc_uncorrectable_volatile:
            yield Hit(
                f"GPU {gpu.index} ({gpu.name}) has {gpu.ecc_uncorrectable_volatile} uncorrectable "
                "ECC errors",
                {"gpu": gpu.index, "uuid": gpu.uuid, "errors": gpu.ecc_uncorrectable_volatile},
            )


@rule(
    "DDP026",
    Remediation(
        "Stop the processes that hold the memory (often a crashed run's leftover ranks): "
        "`nvidia-smi` lists them; kill them or wait for them.",
        ("nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",),
    ),
)
def gpu_memory_taken(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NVML used memory at 50% of the total or more (an error at 90%), with the
    processes holding it.
    Why it matters: the new job runs out of memory at once or after a few steps, or two jobs
    share a GPU and both slow down.
    Example: ranks of a crashed run still alive, each holding 70 GB.
    Fix: stop the stale processes.
    """
    for gpu in visible_devices(facts).gpus:
        if not gpu.memory_total_bytes:
            continue
        share = gpu.memory_used_bytes / gpu.memory_total_bytes
        if share >= MEMORY_TAKEN_WARNING:
            holders = ", ".join(f"{p.pid} ({p.name or '?'})" for p in gpu.processes) or "unknown"
            yield Hit(
                f"GPU {gpu.index} ({gpu.name}) has {share:.0%} of its memory in use "
                f"({gpu.memory_used_bytes / 1024**3:.1f} of {gpu.memory_total_bytes / 1024**3:.1f} "
                f"GiB); held by {holders}",
                {
                    "gpu": gpu.index,
                    "used_bytes": gpu.memory_used_bytes,
                    "total_bytes": gpu.memory_total_bytes,
                    "pids": [p.pid for p in gpu.processes],
                },
                severity=Severity.ERROR if share >= MEMORY_TAKEN_ERROR else None,
            )


@rule(
    "DDP027",
    Remediation(
        "Start at most one rank per visible GPU: torchrun --nproc-per-node=<number of GPUs> "
        "(or --nproc-per-node=gpu).",
    ),
)
def more_ranks_than_gpus(facts: FactSet) -> Iterator[Hit]:
    """What it finds: --nproc (or LOCAL_WORLD_SIZE) above the number of visible GPUs, for a GPU
    backend.
    Why it matters: set_device(local_rank) fails with "CUDA error: invalid device ordinal", or
    ranks share GPUs and NCCL fails with "Duplicate GPU detected".
    Example: torchrun --nproc-per-node 8 on a node where 4 GPUs are visible.
    Fix: --nproc-per-node no higher than the visible GPUs.
    """
    if facts.plan.backend == "gloo" or not gpu_present(facts) or visible_devices(facts).hides_all:
        return
    visible = (
        visible_devices(facts).count
        if facts.nvml
        else facts.torch.device_count
        if facts.torch
        else 0
    )
    for source, value in (
        ("--nproc", facts.plan.nproc),
        ("LOCAL_WORLD_SIZE", env_count(facts.env.get("LOCAL_WORLD_SIZE"))),
    ):
        if value is not None and value > visible:
            yield Hit(
                f"{source}={value} ranks per node, but only {plural(visible, 'GPU')} visible",
                {"ranks": value, "visible_gpus": visible, "source": source},
            )


@rule(
    "DDP028",
    Remediation(
        "Check that the driver is loaded (nvidia-smi), the GPUs are passed into the container "
        "(--gpus all), and CUDA_VISIBLE_DEVICES does not hide them.",
        ("nvidia-smi",),
    ),
)
def gpu_required_missing(facts: FactSet) -> Iterator[Hit]:
    """What it finds: with --require-gpu, no GPU visible to torch or NVML.
    Why it matters: a GPU node whose GPUs vanished (driver, container, variable) must fail its
    gate, not pass it with the GPU probes skipped.
    Example: a CI gate on a new node whose driver failed to load after a kernel update.
    Fix: load the driver, pass the GPUs in, unhide them.
    """
    if not facts.plan.require_gpu:
        return
    torch_ok = bool(facts.torch and facts.torch.cuda_available and facts.torch.device_count)
    visible = visible_devices(facts)
    if not torch_ok and visible.count == 0:
        nvml_result = facts.results.get("nvml")
        why = nvml_result.error if nvml_result and nvml_result.error else "no GPU visible"
        yield Hit(f"--require-gpu: no usable GPU ({why})", {"nvml": why})
