"""Records real job runs (healthy and with injected faults) as fixtures/jobs/*.json.

Run by hand on a CPU machine: `python tests/record_job_fixtures.py`. Each file is a JSON report
(what `run --format json` prints, so `diagnose` reads it) plus "description" and "expect",
the codes that must fire when it is judged again; tests/test_job_rules.py checks them.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import gpu_node_fixtures as gpu_node
from click.testing import CliRunner
from fakes import job_fault

from ddp_doctor import cli

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"
SCENARIOS = {
    "healthy-2rank-gloo": (None, [], "a healthy 2-rank gloo job on a 2-core CPU machine"),
    "rank-never-joins": ("1:init:stall", ["DDP202"], "rank 1 stalls before init_process_group"),
    "rank-crashes": ("1:allreduce:crash", ["DDP307"], "rank 1 raises at the all-reduce stage"),
    "rank-sigkilled": ("1:ddp:kill", ["DDP307"], "rank 1 is SIGKILLed during the DDP step"),
    "collective-hang": ("1:allreduce:stall", ["DDP302"], "rank 1 never enters the all-reduce"),
    "allreduce-corrupt": ("1:allreduce:corrupt", ["DDP301"], "rank 1 adds 1 to 100 elements"),
    "port-in-use": (
        None,
        ["DDP201"],
        "another listener holds --master-port",
        "--master-port",
        "{taken}",
    ),
    "master-unresolvable": (
        None,
        ["DDP203"],
        "--master-addr does not resolve",
        "--master-addr",
        "no-such-host.invalid",
    ),
}


def record(name: str, fault: str | None, expect: list[str], description: str, *extra: str) -> None:
    args = ["run", "--format", "json", "--timeout", "20", "--sizes", "1K:64K:8", "--iters", "2"]
    with socket.socket() as listener, job_fault(fault):  # holds a port for the port-in-use scenario
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = str(listener.getsockname()[1])
        result = CliRunner().invoke(cli.cli, args + [taken if a == "{taken}" else a for a in extra])
    report = json.loads(result.stdout)
    report["description"] = description
    report["expect"] = expect
    (OUT / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(name, [f["code"] for f in report["findings"]])


GIB = 1024**3
MIB = 1024**2


def probe(report: dict, name: str) -> dict:
    return next(p for p in report["probes"] if p["probe"] == name)


def stage(report: dict, rank: int, name: str) -> dict:
    ranks = probe(report, "job")["facts"]["ranks"]
    return next(s for s in ranks[rank]["stages"] if s["stage"] == name)


def on_gpus(report: dict, buses: list[str]) -> None:
    """As if each rank ran on the GPU at that PCI bus id (what a GPU node records)."""
    for identity, bus in zip(probe(report, "job")["facts"]["identities"], buses, strict=True):
        identity.update(device="cuda:0" if bus == buses[0] else "cuda:1", pci_bus_id=bus)


def _duplicate_gpu(report: dict) -> None:
    on_gpus(report, ["00000000:18:00.0", "00000000:18:00.0"])


def _version_skew(report: dict) -> None:
    probe(report, "job")["facts"]["identities"][1]["torch_version"] = "2.4.0+cu121"


def _stray_context(report: dict) -> None:
    on_gpus(report, ["00000000:18:00.0", "00000000:2A:00.0"])
    pids = [i["pid"] for i in probe(report, "job")["facts"]["identities"]]
    stage(report, 0, "memory")["data"] = {
        "gpu_processes": [
            {"gpu": 0, "pci_bus_id": "00000000:18:00.0", "pid": pids[0], "used_bytes": 2 * GIB},
            {
                "gpu": 0,
                "pci_bus_id": "00000000:18:00.0",
                "pid": pids[1],
                "used_bytes": 512 * 1024**2,
            },
            {"gpu": 1, "pci_bus_id": "00000000:2A:00.0", "pid": pids[1], "used_bytes": 2 * GIB},
        ]
    }


def _memory_imbalance(report: dict) -> None:
    stage(report, 0, "ddp")["data"]["peak_allocated_bytes"] = 6 * GIB
    stage(report, 1, "ddp")["data"]["peak_allocated_bytes"] = 2 * GIB


def _grads_diverged(report: dict) -> None:
    for rank in (0, 1):
        stage(report, rank, "ddp")["data"].update(in_sync=False, grad_spread=0.25)


def _low_busbw(report: dict) -> None:
    probe(report, "plan")["facts"]["min_busbw_gbps"] = 1000.0


def _dataparallel(peaks: list[int], output_on: str, model: str) -> dict:
    return {
        "probe": "dataparallel",
        "status": "ok",
        "duration_s": 2.1,
        "error": None,
        "facts": {
            "device_ids": [0, 1],
            "output_device": 0,
            "model_device": model,
            "output_on": output_on,
            "peak_allocated_bytes": peaks,
            "error": None,
        },
    }


def _dp_imbalance(report: dict) -> None:
    report["probes"] = [p for p in report["probes"] if p["probe"] != "dataparallel"]
    report["probes"].append(_dataparallel([9 * GIB, 3 * GIB], "cuda:0", "cuda:0"))


def _dp_output_mismatch(report: dict) -> None:
    report["probes"] = [p for p in report["probes"] if p["probe"] != "dataparallel"]
    report["probes"].append(_dataparallel([3 * GIB, 3 * GIB], "cuda:1", "cuda:1"))


def _addr_not_local(report: dict) -> None:
    job = probe(report, "job")["facts"]
    job.update(
        launched=False,
        ranks=[],
        identities=[],
        bandwidth=[],
        output_tail="",
        not_launched_reason="master port unusable",
    )
    job["preflight"].update(
        master_addr="192.0.2.10",
        master_address="192.0.2.10",
        port_error="EADDRNOTAVAIL: cannot listen on 192.0.2.10:0: Cannot assign requested address",
    )


def _port_privileged(report: dict) -> None:
    """As a user without root sees it: probes/job/launch.py's claim_port on port 98 (its bind
    as uid 65534 failed with EACCES, Permission denied)."""
    _addr_not_local(report)
    probe(report, "job").update(status="failed", error="not launched: master port unusable")
    job = probe(report, "job")["facts"]
    job["preflight"].update(
        master_addr="127.0.0.1",
        master_address="127.0.0.1",
        master_port=98,
        port_error="EACCES: cannot listen on 127.0.0.1:98: Permission denied",
    )


def _hostname_loopback(report: dict) -> None:
    _addr_not_local(report)
    probe(report, "host")["facts"]["hostname_address"] = "127.0.1.1"


def _addr_elsewhere(report: dict) -> None:
    _addr_not_local(report)
    probe(report, "host")["facts"]["hostname_address"] = "192.0.2.11"


def _socket_ifname(report: dict) -> None:
    probe(report, "env")["facts"]["variables"]["NCCL_SOCKET_IFNAME"] = "ib9"
    probe(report, "host")["facts"]["interfaces"] = ["eth0", "lo"]


def _world_size(report: dict) -> None:
    probe(report, "env")["facts"]["variables"].update(WORLD_SIZE="16", LOCAL_WORLD_SIZE="6")


UNUSED_PARAMETERS = (
    "RuntimeError: Expected to have finished reduction in the prior iteration before starting a "
    "new one. This error indicates that your module has parameters that were not used in "
    "producing loss. You can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `torch.nn.parallel.DistributedDataParallel`"
)


def _unused_parameters(report: dict) -> None:
    """rank-crashes, with rank 1's error the one DDP raises for unused parameters."""
    report.update(json.loads((OUT / "rank-crashes.json").read_text()))
    stage(report, 1, "allreduce")["error"] = UNUSED_PARAMETERS
    job = probe(report, "job")["facts"]
    job["output_tail"] = job["output_tail"].replace(
        "RuntimeError: ddp-doctor test fault: rank 1 crashes at allreduce", UNUSED_PARAMETERS
    )


HOST_PID = 3412017  # NVML's pid of rank 0 as the host numbers it; the ranks see 23187...
RANK_USED = 1210 * MIB
STRAY_USED = 504 * MIB


def _own_gpu_rows(ranks: int) -> list[tuple[int, int, int]]:
    return [(rank, HOST_PID + rank, RANK_USED) for rank in range(ranks)]


def _stray_context_container(report: dict) -> None:
    """4 ranks in a container: ranks 1-3 also open a context on GPU 0."""
    gpu_node.on_gpu_node(report, gpus=4, ranks=4)
    strays = [(0, HOST_PID + rank, STRAY_USED) for rank in (1, 2, 3)]
    gpu_node.set_gpu_processes(report, _own_gpu_rows(4) + strays)


def _contexts_container_healthy(report: dict) -> None:
    """4 ranks in a container, each on its own GPU; another user's DataParallel job holds GPUs
    0 and 1 since before the job, and a process of no rank starts on GPU 2 meanwhile."""
    gpu_node.on_gpu_node(report, gpus=4, ranks=4)
    foreign = 2977310
    gpu_node.set_processes_before(report, 0, [(foreign, 6144 * MIB)])
    gpu_node.set_processes_before(report, 1, [(foreign, 3072 * MIB)])
    others = [(0, foreign, 6144 * MIB), (1, foreign, 3072 * MIB), (2, 3419950, 700 * MIB)]
    gpu_node.set_gpu_processes(report, _own_gpu_rows(4) + others)


def _dp_healthy(gpus: int) -> object:
    def edit(report: dict) -> None:
        gpu_node.on_gpu_node(report, gpus=gpus, ranks=gpus)
        gpu_node.set_gpu_processes(report, _own_gpu_rows(gpus))
        gpu_node.dataparallel(report, gpus)

    return edit


def _dp_torch_sees_three(report: dict) -> None:
    gpu_node.on_gpu_node(report, gpus=4, ranks=3)
    torch = gpu_node.probe(report, "torch")["facts"]
    torch.update(device_count=3, devices=torch["devices"][:3])
    gpu_node.set_gpu_processes(report, _own_gpu_rows(3))
    gpu_node.dataparallel(report, 3)


def _dp_gpu0_heavy(report: dict) -> None:
    gpu_node.on_gpu_node(report, gpus=4, ranks=4)
    gpu_node.set_gpu_processes(report, _own_gpu_rows(4))
    gpu_node.dataparallel(report, 4, first_peak=2254 * MIB)


def _dp_output_elsewhere(report: dict) -> None:
    gpu_node.on_gpu_node(report, gpus=2, ranks=2)
    gpu_node.set_gpu_processes(report, _own_gpu_rows(2))
    gpu_node.dataparallel(report, 2, output_on="cuda:1")


def _dp_small_batch(report: dict) -> None:
    gpu_node.on_gpu_node(report, gpus=8, ranks=8)
    gpu_node.set_gpu_processes(report, _own_gpu_rows(8))
    gpu_node.dataparallel(report, 8, batch=6)


# Facts a CPU machine cannot produce, made by editing the healthy recording.
# What torch 2.13's TCPStore client printed in a namespace whose loopback was down, when a
# doctor without the pre-launch route check launched its job there (host name blanked).
UNREACHABLE_OUTPUT = """\
[W1130 13:12:39.248514189 socket.cpp:764] [c10d] The client socket has failed to connect to 2.86.0.0:57063 (errno: 101 - Network is unreachable).
[E1130 13:12:39.248516903 socket.cpp:818] [c10d] The client socket has failed to connect to any network address of (127.0.0.1, 44311).
torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (127.0.0.1, 44311). The client socket has failed to connect to 2.86.0.0:57063 (errno: 101 - Network is unreachable).
"""


def _unreachable_in_job(report: dict) -> None:
    job = probe(report, "job")["facts"]
    job.update(exit_code=1, output_tail=UNREACHABLE_OUTPUT, identities=[], bandwidth=[])
    for rank in job["ranks"]:
        rank.update(stages=[], exit_code=None)


DERIVED = {
    "duplicate-gpu": (_duplicate_gpu, ["DDP305"], "two ranks on one GPU (PCI bus id)"),
    "version-skew": (_version_skew, ["DDP306"], "rank 1 runs another torch"),
    "stray-context-gpu0": (_stray_context, ["DDP403"], "rank 1 holds memory on GPU 0"),
    "rank-memory-imbalance": (_memory_imbalance, ["DDP404"], "rank 0 peaks at 3x rank 1"),
    "ddp-grads-diverged": (_grads_diverged, ["DDP402"], "gradients differ after DDP steps"),
    "low-busbw": (_low_busbw, ["DDP303"], "--min-busbw 1000 on loopback"),
    "dataparallel-imbalance": (_dp_imbalance, ["DDP401"], "DP puts 3x the memory on GPU 0"),
    "dataparallel-output-mismatch": (_dp_output_mismatch, ["DDP405"], "DP model on cuda:1"),
    "master-addr-not-local": (_addr_elsewhere, ["DDP208"], "--master-addr of another host"),
    "master-port-privileged": (_port_privileged, ["DDP230"], "--master-port 98 without root"),
    "hostname-is-loopback": (_hostname_loopback, ["DDP204", "DDP208"], "host name -> 127.0.1.1"),
    "socket-ifname-missing": (_socket_ifname, ["DDP205"], "NCCL_SOCKET_IFNAME=ib9, no ib9"),
    "world-size-mismatch": (_world_size, ["DDP207"], "WORLD_SIZE=16, LOCAL_WORLD_SIZE=6"),
    "stray-context-container": (
        _stray_context_container,
        ["DDP403"],
        "4 ranks in a Docker container (NVML's pids are the host's): ranks 1-3 also hold a "
        "context on GPU 0",
    ),
    "contexts-container-healthy": (
        _contexts_container_healthy,
        [],
        "4 ranks in a Docker container, each on its own GPU; another job on GPUs 0-1 since "
        "before, and a process of no rank starting on GPU 2",
    ),
    "dataparallel-2gpu-healthy": (
        _dp_healthy(2),
        [],
        "DataParallel on 2 H100s as a healthy run puts memory: GPU 0 holds the master weights, "
        "their gradients and the gathered output on top of a replica",
    ),
    "dataparallel-4gpu-healthy": (_dp_healthy(4), [], "DataParallel on 4 H100s, every GPU busy"),
    "dataparallel-8gpu-healthy": (_dp_healthy(8), [], "DataParallel on 8 H100s, every GPU busy"),
    "dataparallel-4gpu-torch-sees-3": (
        _dp_torch_sees_three,
        ["DDP406"],
        "NVML lists 4 visible GPUs, torch.cuda.device_count() is 3: GPU 3 never works",
    ),
    "dataparallel-4gpu-gpu0-heavy": (
        _dp_gpu0_heavy,
        ["DDP401"],
        "DataParallel on 4 H100s: GPU 0 peaks at 2.2 GiB where a healthy step needs 0.15 GiB",
    ),
    "dataparallel-2gpu-output-elsewhere": (
        _dp_output_elsewhere,
        ["DDP405"],
        "the probe asked for output_device 0 and got its output on cuda:1",
    ),
    "dataparallel-8gpu-small-batch": (
        _dp_small_batch,
        ["DDP406"],
        "the probe's steps with a batch of 6 on 8 GPUs (measure(batch=6)): scatter makes 6 "
        "chunks, GPUs 6 and 7 get no replica",
    ),
    "unused-parameters": (
        _unused_parameters,
        ["DDP307"],
        "rank 1 fails with DDP's unused-parameters error; the log patterns add DDP501",
    ),
    "network-unreachable-in-job": (
        _unreachable_in_job,
        ["DDP210"],
        "torchrun's store client could not connect: errno 101, Network is unreachable",
    ),
}


def derive(name: str, edit: object, expect: list[str], description: str) -> None:
    report = json.loads((OUT / "healthy-2rank-gloo.json").read_text())
    edit(report)  # type: ignore[operator]
    report["description"] = description + " (edited from healthy-2rank-gloo)"
    report["expect"] = expect
    (OUT / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    chosen = sys.argv[1:] or list(SCENARIOS) + list(DERIVED)
    for name in chosen:
        if name in SCENARIOS:
            record(name, *SCENARIOS[name])
        else:
            derive(name, *DERIVED[name])


if __name__ == "__main__":
    main()
