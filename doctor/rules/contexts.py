"""CUDA contexts of the job's processes per GPU, counted from NVML's process lists (DDP403).

NVML names processes by the host's pids, also inside a container with its own pid namespace
(NVIDIA/nvidia-docker#1483), where the ranks' own pids differ. So contexts are counted per GPU
and compared with the ranks that run there; a process is known to belong to the job when its
pid was not on any GPU before the job started (the NVML probe's lists), and a context is stray
when its process also holds one on another GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.machine import NvmlFacts


@dataclass(frozen=True)
class GpuProcessRow:
    """One row of NVML's compute process list (nvmlProcessInfo_t), taken in the job."""

    gpu: int | None
    pci_bus_id: str
    pid: int
    used_bytes: int | None


@dataclass(frozen=True)
class StrayContexts:
    """A GPU holding more contexts of the job's processes than ranks run on it."""

    gpu: int | None
    pci_bus_id: str
    contexts: int
    ranks_on_gpu: tuple[int, ...]
    ranks: tuple[int, ...]  # whose contexts are stray here (inferred in a pid namespace)
    used_bytes: int
    pids_are_ranks: bool  # NVML's pids are the ranks' own: no pid namespace between them

    @property
    def extra(self) -> int:
        return self.contexts - len(self.ranks_on_gpu)


def bus_key(bus_id: str) -> str:
    """NVML writes 00000000:18:00.0; torch-derived ids may differ in case and domain width."""
    return bus_id.upper().split(":", 1)[-1]


def job_process_rows(job: JobFacts) -> list[GpuProcessRow]:
    rank0 = job.rank(0)
    record = rank0.stage("memory") if rank0 else None
    rows = record.data.get("gpu_processes") if record and record.ok else None
    found = []
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("pid"), int) and row.get("pci_bus_id"):
            used = row.get("used_bytes")
            found.append(
                GpuProcessRow(
                    row.get("gpu") if isinstance(row.get("gpu"), int) else None,
                    str(row["pci_bus_id"]),
                    row["pid"],
                    used if isinstance(used, int) else None,
                )
            )
    return found


def stray_contexts(job: JobFacts, before: NvmlFacts | None) -> Iterator[StrayContexts]:
    earlier = {p.pid for gpu in before.gpus for p in gpu.processes} if before else set()
    rows = [row for row in job_process_rows(job) if row.pid not in earlier]
    ranks_on: dict[str, list[int]] = defaultdict(list)
    for identity in job.identities:
        if identity.pci_bus_id:
            ranks_on[bus_key(identity.pci_bus_id)].append(identity.rank)
    if not rows or not ranks_on:
        return
    on_gpu: dict[str, dict[int, GpuProcessRow]] = defaultdict(dict)
    gpus_of: dict[int, set[str]] = defaultdict(set)
    for row in rows:
        on_gpu[bus_key(row.pci_bus_id)][row.pid] = row
        gpus_of[row.pid].add(bus_key(row.pci_bus_id))
    rank_of_pid = {i.pid: i for i in job.identities}
    pids_are_ranks = set(gpus_of) <= set(rank_of_pid)
    for bus, processes in on_gpu.items():
        here = sorted(ranks_on.get(bus, []))
        if len(processes) <= len(here):
            continue
        visitors = [pid for pid in processes if gpus_of[pid] - {bus}]
        if pids_are_ranks:
            visitors = [pid for pid in visitors if rank_of_pid[pid].rank not in here]
            ranks = {rank_of_pid[pid].rank for pid in visitors}
        else:  # the process is the rank of the other GPU it holds a context on
            ranks = {
                r
                for pid in visitors
                for other in gpus_of[pid] - {bus}
                for r in ranks_on.get(other, [])
            }
        if not visitors:
            continue  # new contexts of processes that are no rank's: not the job's doing
        first = next(iter(processes.values()))
        yield StrayContexts(
            gpu=first.gpu,
            pci_bus_id=first.pci_bus_id,
            contexts=len(processes),
            ranks_on_gpu=tuple(here),
            ranks=tuple(sorted(ranks - set(here))),
            used_bytes=sum(processes[pid].used_bytes or 0 for pid in visitors),
            pids_are_ranks=pids_are_ranks,
        )
