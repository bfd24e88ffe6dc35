"""GPU-node job fixtures for record_job_fixtures.py: the healthy CPU recording, moved onto the
recorded HGX H100 node (fixtures/facts/healthy-8xh100.json: its NVML and torch facts), with
NVML process lists and DataParallel samples as NVML and torch report them.

Numbers follow the probe's own workload: its model holds 8,393,728 float32 parameters
(33,574,912 bytes), a batch is 256 x 1024 float32, a CUDA context on an H100 takes about
500 MiB of NVML's `used`, and NVML's pids are the host's (NVIDIA/nvidia-docker#1483).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

FACTS = Path(__file__).resolve().parent.parent / "fixtures" / "facts"
MIB = 1024**2
PARAMETER_BYTES = 8_393_728 * 4
BATCH = 256
BATCH_BYTES = 2 * BATCH * 1024 * 4
IDLE_USED = 512 * MIB  # nvmlMemory_t.used of an idle H100 in the recorded node
CONTEXT_USED = 500 * MIB


def probe(report: dict, name: str) -> dict:
    return next(p for p in report["probes"] if p["probe"] == name)


def _recorded_node() -> dict:
    return json.loads((FACTS / "healthy-8xh100.json").read_text())


def on_gpu_node(report: dict, gpus: int, ranks: int, container: bool = True) -> None:
    """The recorded NVML and torch facts of `gpus` H100s; the job's ranks on GPUs 0..ranks-1
    over NCCL; in a Docker container (its own pid namespace) unless `container` is False."""
    node = _recorded_node()
    nvml = copy.deepcopy(probe(node, "nvml"))
    nvml["facts"]["gpus"] = nvml["facts"]["gpus"][:gpus]
    torch = copy.deepcopy(probe(node, "torch"))
    torch["facts"].update(device_count=gpus, devices=torch["facts"]["devices"][:gpus])
    report["probes"] = [
        nvml if p["probe"] == "nvml" else torch if p["probe"] == "torch" else p
        for p in report["probes"]
    ]
    probe(report, "host")["facts"].update(container="docker" if container else None)
    probe(report, "plan")["facts"]["nproc"] = ranks if ranks != gpus else None
    _with_ranks(probe(report, "job")["facts"], ranks)
    job = probe(report, "job")["facts"]
    job.update(backend="nccl", nproc=ranks)
    buses = bus_ids(report)
    versions = {
        "torch_version": torch["facts"]["version"],
        "cuda_version": torch["facts"]["cuda_version"],
        "nccl_version": torch["facts"]["nccl_version"],
        "driver_version": nvml["facts"]["driver_version"],
    }
    for rank in job["ranks"]:
        init = next(s for s in rank["stages"] if s["stage"] == "init")
        init["data"].update(backend="nccl", device=f"cuda:{rank['rank']}")
    for identity in job["identities"]:
        identity.update(device=f"cuda:{identity['rank']}", pci_bus_id=buses[identity["rank"]])
        identity.update(versions)


def bus_ids(report: dict) -> list[str]:
    return [gpu["pci_bus_id"] for gpu in probe(report, "nvml")["facts"]["gpus"]]


def _with_ranks(job: dict, count: int) -> None:
    """The job with `count` ranks: rank 1's record copied for ranks 2.., pids counting up."""
    template_rank = job["ranks"][1]
    template_identity = job["identities"][1]
    first_pid = job["identities"][0]["pid"]
    job["ranks"] = job["ranks"][:count]
    job["identities"] = job["identities"][:count]
    for rank in range(len(job["ranks"]), count):
        record = copy.deepcopy(template_rank)
        record["rank"] = rank
        job["ranks"].append(record)
        identity = copy.deepcopy(template_identity)
        identity.update(rank=rank, local_rank=rank, pid=first_pid + rank)
        job["identities"].append(identity)
    for identity in job["identities"]:
        identity["world_size"] = count


def memory_stage(report: dict) -> dict:
    rank0 = probe(report, "job")["facts"]["ranks"][0]
    return next(s for s in rank0["stages"] if s["stage"] == "memory")


def set_gpu_processes(report: dict, rows: list[tuple[int, int, int]]) -> None:
    """Rank 0's memory stage as NVML listed it: (gpu index, host pid, usedGpuMemory bytes)."""
    buses = bus_ids(report)
    memory_stage(report)["data"] = {
        "gpu_processes": [
            {"gpu": gpu, "pci_bus_id": buses[gpu], "pid": pid, "used_bytes": used}
            for gpu, pid, used in rows
        ]
    }


def set_processes_before(report: dict, gpu: int, pids_used: list[tuple[int, int]]) -> None:
    """Processes the NVML probe found on a GPU before the job started."""
    facts = probe(report, "nvml")["facts"]["gpus"][gpu]
    facts["processes"] = [
        {"pid": pid, "name": None, "used_memory_bytes": used} for pid, used in pids_used
    ]
    facts["memory_used_bytes"] += sum(used for _, used in pids_used)


def dataparallel(
    report: dict,
    torch_devices: int,
    *,
    batch: int = BATCH,
    first_peak: int | None = None,
    output_on: str = "cuda:0",
) -> dict[str, Any]:
    """The DataParallel probe over the first `torch_devices` of the node's GPUs, every visible
    GPU sampled. A device takes part when the batch gives it a chunk (scatter makes at most
    `batch` chunks); its peak is a replica with its activations and gradients, GPU 0's the
    master weights, their gradients and the reduce buffers on top."""
    buses = bus_ids(report)
    chunk_rows = -(-batch // torch_devices)
    working = min(torch_devices, -(-batch // chunk_rows))
    replica_peak = 2 * PARAMETER_BYTES + chunk_rows * (2 * 4096 + 2 * 1024) * 4 * 3
    peaks = [replica_peak if device < working else 0 for device in range(torch_devices)]
    peaks[0] = first_peak or replica_peak + 2 * PARAMETER_BYTES + BATCH_BYTES
    gpus = []
    for index, bus in enumerate(buses):
        device = index if index < torch_devices else None
        busy = device is not None and device < working
        held = peaks[device] + 160 * MIB if busy and device is not None else 0
        gpus.append(
            {
                "nvml_index": index,
                "pci_bus_id": bus,
                "device_id": device,
                "samples": 61,
                "memory_used_min_bytes": IDLE_USED,
                "memory_used_max_bytes": IDLE_USED + (CONTEXT_USED + held if busy else 0),
                "utilization_gpu_max_percent": (31 if index == 0 else 18) if busy else 0,
            }
        )
    facts = {
        "device_ids": list(range(torch_devices)),
        "output_device": 0,
        "model_device": "cuda:0",
        "output_on": output_on,
        "peak_allocated_bytes": peaks,
        "error": None,
        "batch": batch,
        "steps": 412,
        "forward_devices": list(range(working)),
        "device_bus_ids": buses[:torch_devices],
        "parameter_bytes": PARAMETER_BYTES,
        "batch_bytes": 2 * batch * 1024 * 4,
        "gpus": gpus,
        "sampling_error": None,
    }
    result = {"probe": "dataparallel", "status": "ok", "duration_s": 4.2, "error": None}
    result["facts"] = facts
    report["probes"] = [p for p in report["probes"] if p["probe"] != "dataparallel"]
    report["probes"].append(result)
    return facts
