"""The GPU machines of fixtures/bandwidth, described as NVML would report them, each with the
busbw rows a job on it measures and the verdict written by hand (tests/make_bandwidth_fixtures.py
builds the reports). Bus ids, link counts and CPU lists follow the HGX/DGX layouts where known;
busbw follows the published results each description cites.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from fakes import MIB, FakeGpu, FakeNvLink, FakePair

HGX_H100_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
# HGX H100: 18 NVLinks per GPU to the four NVSwitch chips, 5 + 4 + 4 + 5.
HGX_H100_SWITCHES = ("05",) * 5 + ("06",) * 4 + ("07",) * 4 + ("08",) * 5
HGX_A100_BUSES = ("0E", "13", "49", "4F", "91", "97", "CD", "D2")  # NVIDIA/nccl-tests#100
HGX_A100_SWITCHES = tuple(s for s in ("C4", "C5", "C6", "C7", "C8", "C9") for _ in range(2))


@dataclass
class Machine:
    description: str
    gpus: list[FakeGpu]
    pairs: dict[tuple[int, int], FakePair]
    cpu_model: str
    cpu_count: int
    busbw: dict[str, list[float]]  # per collective, GB/s at SIZES
    expect: list[str]
    verdict: dict[str, float | None]  # expected GB/s per collective the tables must show
    env: dict[str, str] = field(default_factory=dict)
    rank_cpus: list[str] | None = None  # each rank's allowed CPUs; None: all of them
    jobs: bool = True
    torch_error: str | None = None
    iommu_groups: dict[str, tuple[int, str]] = field(default_factory=dict)  # bus id: group, type


def cpus(*ranges: tuple[int, int]) -> tuple[int, ...]:
    return tuple(cpu for low, high in ranges for cpu in range(low, high + 1))


def gpu(model: str, bus: str, index: int, **topology: object) -> FakeGpu:
    name, memory, capability = MODELS[model]
    return FakeGpu(
        name=name,
        uuid=f"GPU-{model[:4].lower()}{index:02d}c3a-8b2f-4c71-9e6a-0f3b2d4c5a{index:02d}",
        bus_id=f"00000000:{bus}:00.0",
        memory_total=memory,
        memory_used=0,
        capability=capability,
        mig_mode=None if "GeForce" in name or "A6000" in name else 0,
        ecc_uncorrected=None if "GeForce" in name else 0,
        **topology,  # type: ignore[arg-type]
    )


MODELS = {
    "h100": ("NVIDIA H100 80GB HBM3", 81559 * MIB, (9, 0)),
    "a100": ("NVIDIA A100-SXM4-80GB", 81920 * MIB, (8, 0)),
    "a100pcie": ("NVIDIA A100 80GB PCIe", 81920 * MIB, (8, 0)),
    "4090": ("NVIDIA GeForce RTX 4090", 24564 * MIB, (8, 9)),
    "a6000": ("NVIDIA RTX A6000", 49140 * MIB, (8, 6)),
}
H100_SOCKETS = (cpus((0, 55), (112, 167)), cpus((56, 111), (168, 223)))


def hgx_h100(down: dict[int, int] | None = None, fabric: str = "completed") -> list[FakeGpu]:
    """8x H100 SXM on 2x Xeon 8480C: GPUs 0-3 on socket 0, 4-7 on socket 1, PCIe gen5 x16."""
    down = down or {}
    return [
        gpu(
            "h100",
            bus,
            i,
            pcie_max=(5, 16),
            pcie_loaded=(5, 16),
            gpu_max_gen=5,
            memory_nodes=(i // 4,),
            cpus=H100_SOCKETS[i // 4],
            nvlinks=tuple(
                FakeNvLink(active=down.get(i) != link, remote_bus_id=f"00000000:{switch}:00.0")
                for link, switch in enumerate(HGX_H100_SWITCHES)
            ),
            fabric=(fabric, 0),
        )
        for i, bus in enumerate(HGX_H100_BUSES)
    ]


def sockets_pairs(
    count: int, socket_of: list[int], switch_of: list[int] | None = None, **p2p: str
) -> dict[tuple[int, int], FakePair]:
    """Common ancestors from which socket (and PCIe switch) each GPU hangs off."""
    pairs = {}
    for a in range(count):
        for b in range(a + 1, count):
            if switch_of and switch_of[a] == switch_of[b]:
                ancestor = "single"
            else:
                ancestor = "node" if socket_of[a] == socket_of[b] else "system"
            status = p2p.get(ancestor, "ok")
            nvlink = "ok" if p2p.get("nvlink") == "ok" else "not-supported"
            pairs[(a, b)] = FakePair(ancestor, status, status, nvlink)
    return pairs


def h100_machine(description: str, **changes: object) -> Machine:
    machine = Machine(
        description=description,
        gpus=hgx_h100(),
        pairs=sockets_pairs(8, [i // 4 for i in range(8)], nvlink="ok"),
        cpu_model="Intel(R) Xeon(R) Platinum 8480C",
        cpu_count=224,
        busbw={"all_reduce": [38.5, 112.0, 231.0, 342.0, 415.0]},
        expect=[],
        verdict={"all_reduce": 480.0},
    )
    return dataclasses.replace(machine, **changes)


PCIE_SWITCH_4X = sockets_pairs(4, [0, 0, 0, 0], switch_of=[0, 0, 0, 0])
A100_PCIE_4X = [
    gpu("a100pcie", bus, i, cpus=cpus((0, 27), (56, 83)))
    for i, bus in enumerate(("4F", "52", "56", "57"))
]
MACHINES: dict[str, Machine] = {
    "h100-nvls-healthy": h100_machine(
        "HGX H100 (8x H100 SXM, 18 NVLink 4 links each to 4 NVSwitches, NCCL 2.21 with NVLink "
        "SHARP), swept with --ops all_reduce,all_gather,reduce_scatter. Busbw at 256 MiB: "
        "all-reduce 415 GB/s (86% of the ~480 GB/s NVLS peak that NVIDIA/nccl-tests#212 reports "
        "at large sizes), all_gather and reduce_scatter ~330 GB/s against the 370 GB/s ring. "
        "Verdict: nothing to report.",
        busbw={
            "all_reduce": [38.5, 112.0, 231.0, 342.0, 415.0],
            "all_gather": [30.1, 95.4, 198.0, 286.0, 331.0],
            "reduce_scatter": [29.8, 96.2, 201.0, 289.0, 334.0],
        },
        verdict={"all_reduce": 480.0, "all_gather": 370.8, "reduce_scatter": 370.8},
    ),
    "h100-nvlink-down": h100_machine(
        "The same HGX H100 with NVLink 7 of GPU 5 down (nvidia-smi nvlink -s: inactive): GPU 5 "
        "has 17 links, so every ring runs at 17 x 20.6 GB/s and NVLS at ~453 GB/s; busbw 398 "
        "GB/s at 256 MiB. Verdict: DDP321 names GPU 5 and link 7; the bandwidth itself is "
        "inside the band.",
        gpus=hgx_h100(down={5: 7}),
        busbw={"all_reduce": [37.9, 108.0, 222.0, 327.0, 398.0]},
        expect=["DDP321"],
        verdict={"all_reduce": 453.3},
    ),
    "nccl-p2p-disable": h100_machine(
        "The same healthy HGX H100 with NCCL_P2P_DISABLE=1 left in the environment: NCCL copies "
        "through host memory and all-reduce reaches 18.7 GB/s at 256 MiB. Verdict: DDP324 names "
        "the variable, DDP303 the 4% of the expected 480 GB/s with it as the cause.",
        env={"NCCL_P2P_DISABLE": "1"},
        busbw={"all_reduce": [4.1, 9.8, 15.2, 17.9, 18.7]},
        expect=["DDP303", "DDP324"],
    ),
    "fabric-manager-down": h100_machine(
        "An HGX H100 whose nvidia-fabricmanager is not running (after a driver update): every "
        "GPU's fabric state is Not Started, CUDA fails with error 802 and torch sees no GPU; "
        "run with --no-jobs. Verdict: DDP325 for each of the 8 GPUs.",
        gpus=hgx_h100(fabric="not-started"),
        jobs=False,
        busbw={},
        torch_error="CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you "
        "run some cuda functions before calling NumCudaDevices() that might have already set "
        "an error? Error 802: system not yet initialized",
        expect=["DDP325"],
        verdict={},
    ),
    "a100-sxm-8x": Machine(
        description="HGX A100 (8x A100 SXM4 80GB, 12 NVLink 3 links each to 6 NVSwitches, bus "
        "ids as in NVIDIA/nccl-tests#100, 2x EPYC 7742). Expected 12 x 20 GB/s = 240 GB/s "
        "(published: about 230 GB/s, ~200 GB/s in NVIDIA/nccl-tests#149); busbw 204 GB/s at "
        "256 MiB. Verdict: nothing to report.",
        gpus=[
            gpu(
                "a100",
                bus,
                i,
                memory_nodes=(i // 4,),
                cpus=cpus((0, 63), (128, 191)) if i < 4 else cpus((64, 127), (192, 255)),
                nvlinks=tuple(
                    FakeNvLink(remote_bus_id=f"00000000:{s}:00.0", version=4)
                    for s in HGX_A100_SWITCHES
                ),
            )
            for i, bus in enumerate(HGX_A100_BUSES)
        ],
        pairs=sockets_pairs(8, [i // 4 for i in range(8)], nvlink="ok"),
        cpu_model="AMD EPYC 7742 64-Core Processor",
        cpu_count=256,
        busbw={"all_reduce": [24.2, 71.0, 142.0, 188.0, 204.0]},
        expect=[],
        verdict={"all_reduce": 240.0},
    ),
    "a100-pcie-8x": Machine(
        description="8x A100 80GB PCIe (no NVLink bridges) on 2x EPYC 7763, two GPUs per PCIe "
        "gen4 switch, two switches per socket; NCCL uses P2P everywhere on AMD, and the ring "
        "crosses the sockets at NCCL's 16 GB/s. Busbw 13.4 GB/s at 256 MiB. Verdict: expected "
        "16 GB/s, nothing to report.",
        gpus=[
            gpu(
                "a100pcie",
                bus,
                i,
                memory_nodes=(i // 4,),
                cpus=cpus((0, 63)) if i < 4 else cpus((64, 127)),
            )
            for i, bus in enumerate(("01", "02", "41", "42", "81", "82", "C1", "C2"))
        ],
        pairs=sockets_pairs(8, [i // 4 for i in range(8)], switch_of=[i // 2 for i in range(8)]),
        cpu_model="AMD EPYC 7763 64-Core Processor",
        cpu_count=128,
        busbw={"all_reduce": [3.1, 7.9, 11.6, 13.0, 13.4]},
        expect=[],
        verdict={"all_reduce": 16.0},
    ),
    "rtx4090-no-p2p": Machine(
        description="A workstation with 2x GeForce RTX 4090 (PCIe gen4 x16 each, on separate "
        "root ports of a Threadripper 7960X): NVML reports P2P as not supported by the GPU, so "
        "NCCL goes through host memory; busbw 9.8 GB/s at 256 MiB. Verdict: expected 24 GB/s "
        "through host memory, with its wide band (a quarter): nothing to report.",
        gpus=[gpu("4090", bus, i, cpus=cpus((0, 47))) for i, bus in enumerate(("01", "41"))],
        pairs={(0, 1): FakePair("hostbridge", "gpu-not-supported", "gpu-not-supported")},
        cpu_model="AMD Ryzen Threadripper 7960X 24-Cores",
        cpu_count=48,
        busbw={"all_reduce": [2.2, 5.1, 8.0, 9.3, 9.8]},
        expect=[],
        verdict={"all_reduce": 24.0},
    ),
    "two-sockets-4gpu": Machine(
        description="4x RTX A6000 on 2x Xeon Gold 6338, GPUs 0-1 on socket 0 and 2-3 on "
        "socket 1, launched under `numactl --cpunodebind=0` so every rank runs on socket 0's "
        "CPUs. On Intel NCCL uses P2P only below a PCIe switch, so the ring goes through host "
        "memory and crosses the sockets at NCCL's 10 GB/s; busbw 6.9 GB/s. Verdict: DDP323 for "
        "ranks 2 and 3; the bandwidth is inside its band.",
        gpus=[
            gpu(
                "a6000",
                bus,
                i,
                memory_nodes=(i // 2,),
                cpus=cpus((0, 31), (64, 95)) if i < 2 else cpus((32, 63), (96, 127)),
            )
            for i, bus in enumerate(("17", "31", "98", "B1"))
        ],
        pairs=sockets_pairs(4, [0, 0, 1, 1], system="ioh-topology-not-supported"),
        cpu_model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
        cpu_count=128,
        busbw={"all_reduce": [1.9, 4.4, 6.1, 6.7, 6.9]},
        rank_cpus=["0-31,64-95"] * 4,
        expect=["DDP323"],
        verdict={"all_reduce": 10.0},
    ),
    "gen4-x8-under-load": Machine(
        description="4x A100 80GB PCIe under one PCIe gen4 switch on a Xeon Gold 6348: GPU 2's "
        "link trains at x8 under load (max x16; a damaged riser), so the P2P ring runs at half "
        "rate: 10.3 GB/s at 256 MiB against the 24 GB/s of gen4 x16. Verdict: DDP320 for GPU "
        "2, and DDP303 naming its link as the cause.",
        gpus=[
            dataclasses.replace(g, pcie_loaded=(4, 8), pcie_idle=(1, 8)) if i == 2 else g
            for i, g in enumerate(A100_PCIE_4X)
        ],
        pairs=PCIE_SWITCH_4X,
        cpu_model="Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz",
        cpu_count=112,
        busbw={"all_reduce": [2.6, 6.2, 8.9, 10.0, 10.3]},
        expect=["DDP303", "DDP320"],
        verdict={"all_reduce": 24.0},
    ),
    "idle-link-gen1": Machine(
        description="The same 4x A100 PCIe machine, healthy: at rest every link reads gen1 x16 "
        "(power saving), under the job's load gen4 x16; busbw 20.9 GB/s at 256 MiB. Verdict: "
        "nothing to report (idle readings are never judged).",
        gpus=A100_PCIE_4X,
        pairs=PCIE_SWITCH_4X,
        cpu_model="Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz",
        cpu_count=112,
        busbw={"all_reduce": [4.9, 12.8, 18.2, 20.3, 20.9]},
        expect=[],
        verdict={"all_reduce": 24.0},
    ),
    "acs-blocks-p2p": Machine(
        description="The 4x A100 PCIe machine with the IOMMU on and ACS left enabled on the "
        "PCIe switch's downstream ports (the BIOS default on many servers): Linux gives each "
        "GPU its own IOMMU group, NVML still reports P2P as OK, but the switch sends every P2P "
        "request up to the CPU: 9.6 GB/s at 256 MiB against the 24 GB/s of direct P2P. "
        "Verdict: DDP322 for the 6 pairs, and DDP303 naming them.",
        gpus=A100_PCIE_4X,
        pairs=PCIE_SWITCH_4X,
        cpu_model="Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz",
        cpu_count=112,
        busbw={"all_reduce": [2.3, 5.6, 8.3, 9.3, 9.6]},
        expect=["DDP303", "DDP322"],
        verdict={"all_reduce": 24.0},
        iommu_groups={
            f"0000:{bus.lower()}:00.0": (41 + i, "DMA-FQ")
            for i, bus in enumerate(("4F", "52", "56", "57"))
        },
    ),
}
