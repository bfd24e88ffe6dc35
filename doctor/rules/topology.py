"""DDP320-DDP323, DDP325: how the GPUs are wired (NVML's topology, read during the job)."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.facts.topology import GpuPair
from ddp_doctor.model import Remediation
from ddp_doctor.readings.topology_issues import (
    FarRank,
    blocked_p2p,
    degraded_links,
    fabric_not_ready,
    far_ranks,
    nvlinks_down,
)
from ddp_doctor.registry import Hit, rule
from ddp_doctor.rules.common import plural


@rule(
    "DDP320",
    Remediation(
        "Reseat the GPU (or its riser and cable) and check that the slot is wired x16; in the "
        "BIOS set the slot to its full PCIe generation instead of Auto/Gen1-3; compare "
        "LnkCap with LnkSta in lspci while the GPU is busy, and look for AER errors in dmesg. "
        "A link that stays degraded after reseating points to the riser, slot or GPU.",
        (
            "nvidia-smi -q -d PERFORMANCE,PCIE",
            "sudo lspci -vvv -s <bus id> | grep -E 'LnkCap|LnkSta'",
            "sudo dmesg | grep -i -E 'aer|pcie bus error'",
        ),
    ),
)
def pcie_link_degraded(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a GPU of the job whose PCIe link ran below its maximum generation or
    width (nvmlDeviceGetMax* vs nvmlDeviceGetCurr*) while the job's bandwidth stage ran. Idle
    readings are never judged: a GPU at rest drops its link to gen1 to save power.
    Why it matters: a gen4 x16 link trained at x8 halves every transfer that crosses it:
    host-to-GPU copies, and the ring itself on GPUs without NVLink.
    Example: after a riser swap, `nvidia-smi -q` shows "Link Width Max 16x, Current 8x" under
    load on one GPU.
    Fix: reseat the GPU or riser, set the slot's generation in the BIOS, check for AER errors.
    """
    for found in degraded_links(facts):
        gpu, sample, pcie = found.gpu, found.under_load, found.gpu.pcie
        yield Hit(
            f"GPU {gpu.index} ({gpu.pci_bus_id}) ran its PCIe link at gen{sample.gen} "
            f"x{sample.width} under load; it can do gen{pcie.max_gen} x{pcie.max_width}",
            {
                "gpu": gpu.index,
                "pci_bus_id": gpu.pci_bus_id,
                "gen_under_load": sample.gen,
                "width_under_load": sample.width,
                "max_gen": pcie.max_gen,
                "max_width": pcie.max_width,
            },
        )


@rule(
    "DDP321",
    Remediation(
        "Read each link's state and error counters; a link that is down after a reboot needs the "
        "GPU baseboard serviced (reseat, or replace the GPU or NVLink bridge). On NVSwitch "
        "systems check that nvidia-fabricmanager runs and matches the driver version.",
        ("nvidia-smi nvlink -s", "nvidia-smi nvlink -e", "nvidia-smi topo -m"),
    ),
)
def nvlink_down(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a GPU with fewer active NVLinks (nvmlDeviceGetNvLinkState) than another GPU
    of its model here: a link, a bridge or a whole GPU-to-GPU connection missing. The links
    NVML reports inactive are named. A count that is low on every GPU alike (an H800's 8 links)
    is how the machine is built, not reported.
    Why it matters: every ring through that GPU runs at its reduced NVLink bandwidth (17 of 18
    links is ~6% less; a missing bridge sends the pair over PCIe), and a training job's
    all-reduce slows for all GPUs.
    Example: `nvidia-smi nvlink -s` shows "Link 7: <inactive>" on GPU 5 of an HGX H100.
    Fix: check `nvidia-smi nvlink -s`, reseat or service the GPU, bridge or baseboard.
    """
    for found in nvlinks_down(facts):
        gpu = found.gpu
        links = ", ".join(str(link) for link in found.down) or "not reported"
        yield Hit(
            f"GPU {gpu.index} ({gpu.pci_bus_id}) has {found.active} active NVLinks where "
            f"{found.usual} are usual here; inactive links: {links}",
            {
                "gpu": gpu.index,
                "pci_bus_id": gpu.pci_bus_id,
                "active": found.active,
                "usual": found.usual,
                "down": list(found.down),
            },
        )


@rule(
    "DDP322",
    Remediation(
        "Let the PCIe switch route P2P itself: disable ACS on the switch's downstream ports "
        "(BIOS: PCIe ACS off; or with setpci as NCCL's troubleshooting guide shows; once it is "
        "off, the GPUs of one switch share an IOMMU group), and boot with the IOMMU off or in "
        "passthrough (intel_iommu=on iommu=pt, amd_iommu=on iommu=pt). In a VM, place both GPUs "
        "behind one virtual PCIe switch. A driver registry key (disabled-by-regkey) is set in "
        "the nvidia module options.",
        (
            "nvidia-smi topo -p2p rw",
            "sudo lspci -vvv | grep -i acsctl",
            "cat /proc/cmdline",
            "ls -l /sys/bus/pci/devices/*/iommu_group",
        ),
    ),
)
def p2p_blocked_behind_switch(facts: FactSet) -> Iterator[Hit]:
    """What it finds: two GPUs under one PCIe switch (NVML common ancestor SINGLE or MULTIPLE,
    no NVLink between them) that cannot use P2P the direct way: Linux put them in separate
    IOMMU groups (it does so only when ACS isolates them, and ACS then redirects their P2P
    requests up to the CPU's root complex); NVML reports P2P as not supported by the chipset
    or topology, disabled by a registry key, or unknown; or CUDA refused peer access in the job
    (torch.cuda.can_device_access_peer) although NVML allowed it. GPUs that do not support P2P
    themselves (GeForce: GPU_NOT_SUPPORTED) are not reported.
    Why it matters: their traffic goes up to the CPU and back through the switch's uplink,
    halving the bandwidth at best; where ACS redirects P2P that NVML still reports as OK,
    transfers can hang or return garbage (DDP301/DDP302).
    Example: 4 A100 PCIe under one PLX switch, IOMMU on, `lspci -vvv` shows "ACSCtl: SrcValid+
    ReqRedir+ CmpltRedir+" on the switch's downstream ports; each GPU has its own IOMMU group.
    Fix: ACS off on the switch ports, IOMMU off or passthrough, both GPUs behind one switch
    in a VM.
    """
    groups: dict[str, list[GpuPair]] = {}
    for found in blocked_p2p(facts):
        groups.setdefault(found.why, []).append(found.pair)
    iommu = {gpu.index: gpu.iommu_group for gpu in facts.topology.gpus} if facts.topology else {}
    for why, pairs in groups.items():
        listed = ", ".join(f"{p.a}-{p.b}" for p in pairs)
        gpus = sorted({gpu for p in pairs for gpu in (p.a, p.b)})
        yield Hit(
            f"{plural(len(pairs), 'pair')} of GPUs under one PCIe switch cannot use P2P "
            f"directly: {why}; GPUs {listed}",
            {
                "pairs": [[p.a, p.b] for p in pairs],
                "common_ancestors": sorted({str(p.common_ancestor) for p in pairs}),
                "why": why,
                "iommu_groups": {str(gpu): iommu.get(gpu) for gpu in gpus},
            },
        )


@rule(
    "DDP323",
    Remediation(
        "Bind each rank to the CPUs of its GPU's NUMA node (the CPU Affinity column of "
        "`nvidia-smi topo -m`): torchrun --numa-binding node (torch 2.13), numactl "
        "--cpunodebind=N --membind=N per rank, or under SLURM --cpu-bind with "
        "--gpu-bind=closest; drop a numactl or taskset that wraps the whole launch.",
        ("nvidia-smi topo -m", "numactl --hardware"),
    ),
)
def rank_cpu_far_from_gpu(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a rank whose allowed CPUs (sched_getaffinity, read in the rank) include
    none of the CPUs NVML names as near its GPU (nvmlDeviceGetCpuAffinity). A rank free to run
    anywhere is not reported.
    Why it matters: the rank's host memory, pinned buffers and NCCL's proxy thread then live
    on the other socket: every host-device copy and every host-memory transfer crosses the
    inter-socket link, and data loading competes for it.
    Example: `numactl --cpunodebind=0 torchrun --nproc-per-node 4 train.py` on a 2-socket
    machine whose GPUs 2 and 3 hang off socket 1.
    Fix: bind each rank near its own GPU (torchrun --numa-binding node, numactl per rank).
    """
    groups: dict[tuple[str, str], list[FarRank]] = {}
    for found in far_ranks(facts):
        key = (str(found.identity.cpu_affinity), str(found.gpu.cpu_affinity))
        groups.setdefault(key, []).append(found)
    for (rank_cpus, gpu_cpus), found in groups.items():
        ranks = [f.identity.rank for f in found]
        gpus = sorted({f.gpu.index for f in found})
        nodes = sorted({f.gpu.numa_node for f in found if f.gpu.numa_node is not None})
        where = f" on NUMA node {', '.join(map(str, nodes))}" if nodes else ""
        several = len(ranks) > 1
        yield Hit(
            f"rank{'s' if several else ''} {', '.join(map(str, ranks))} may run only on CPUs "
            f"{rank_cpus}, none of them near {'their GPUs' if several else 'its GPU'} "
            f"{', '.join(map(str, gpus))} (NVML: near CPUs {gpu_cpus}{where})",
            {
                "ranks": ranks,
                "gpus": gpus,
                "rank_cpus": rank_cpus,
                "gpu_cpus": gpu_cpus,
                "gpu_numa_nodes": nodes,
            },
        )


@rule(
    "DDP325",
    Remediation(
        "Start NVIDIA Fabric Manager (same version as the driver) and wait for every GPU's "
        "fabric state to read Completed before training; its log says why a GPU failed to join.",
        (
            "systemctl status nvidia-fabricmanager",
            "sudo systemctl enable --now nvidia-fabricmanager",
            "nvidia-smi -q | grep -A 4 -i fabric",
        ),
    ),
)
def nvswitch_fabric_not_ready(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a GPU whose NVSwitch fabric state (nvmlDeviceGetGpuFabricInfo) is Not
    Started or In Progress, or Completed with a failed status.
    Why it matters: on NVSwitch systems (HGX/DGX H100, H200) CUDA refuses to start until the
    GPU has joined the fabric ("system not yet initialized", CUDA error 802), so torch sees no
    GPU; a GPU that failed to join has no NVLink to the others.
    Example: after a driver update nvidia-fabricmanager was left at the old version and does
    not start; every GPU reports fabric state "Not Started".
    Fix: start nvidia-fabricmanager at the driver's version.
    """
    for gpu in fabric_not_ready(facts):
        assert gpu.fabric is not None
        status = "" if gpu.fabric.status in (0, None) else f", NVML status {gpu.fabric.status}"
        yield Hit(
            f"GPU {gpu.index} ({gpu.pci_bus_id}) has not joined the NVSwitch fabric: state "
            f"{gpu.fabric.state}{status}",
            {"gpu": gpu.index, "state": gpu.fabric.state, "status": gpu.fabric.status},
        )
