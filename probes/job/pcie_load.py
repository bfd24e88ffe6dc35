"""The GPUs' PCIe links read under load: sampled from the parent while the job's bandwidth
stage runs, since an idle GPU drops its link to a lower generation to save power.

The parent samples (no torch import, no work inside the ranks): the job's wait loop reports
rank 0's stage every 50 ms, and while that is the bandwidth stage a thread of the sampler reads
every GPU's link every 10 ms (the stage can last a fraction of a second on NVLink machines).
The fastest state seen per GPU is what counts, so a sample taken as the load ramps up does no
harm.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from types import ModuleType
from typing import Any

from ddp_doctor.facts.job import JobFacts
from ddp_doctor.facts.topology import PcieSample, TopologyFacts, normal_bus_id
from ddp_doctor.probes.base import ProbeSkipped
from ddp_doctor.probes.nvml import import_pynvml

LOAD_STAGE = "bandwidth"
SAMPLE_INTERVAL_S = 0.01


class PcieLoadSampler:
    """Use as a context manager around the job; `on_stage` is the job's stage watcher."""

    def __init__(self, nvml: ModuleType | None = None) -> None:
        self.nvml = nvml
        self.handles: dict[str, Any] = {}
        self.best: dict[str, PcieSample] = {}
        self.error: str | None = None
        self.saw_load_stage = False
        self.started = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PcieLoadSampler:
        try:
            self.nvml = self.nvml or import_pynvml()
        except ProbeSkipped as skipped:
            self.error = skipped.reason
            return self
        try:
            self.nvml.nvmlInit()
            self.started = True
            for index in range(self.nvml.nvmlDeviceGetCount()):
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                bus_id = normal_bus_id(_text(self.nvml.nvmlDeviceGetPciInfo(handle).busId))
                self.handles[str(bus_id)] = handle
        except self.nvml.NVMLError as error:
            self.error = f"NVML could not start: {error}"
        return self

    def __exit__(self, *_: object) -> None:
        self._stop_sampling()
        if self.nvml is not None and self.started:
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()

    def on_stage(self, stage: str | None) -> None:
        """Called by the job's wait loop with the stage rank 0 is in."""
        if stage == LOAD_STAGE and self._thread is None:
            self.saw_load_stage = True
            self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
            self._thread.start()
        elif stage != LOAD_STAGE:
            self._stop_sampling()

    def _sample_until_stopped(self) -> None:
        self.sample()
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self.sample()

    def _stop_sampling(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    def sample(self) -> None:
        if self.error or self.nvml is None:
            return
        for bus_id, handle in self.handles.items():
            try:
                gen = int(self.nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
                width = int(self.nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
            except self.nvml.NVMLError as error:
                self.error = f"NVML stopped answering while the job ran: {error}"
                return
            seen = self.best.get(bus_id)
            count = seen.samples + 1 if seen else 1
            gen, width = max(gen, seen.gen if seen else 0), max(width, seen.width if seen else 0)
            self.best[bus_id] = PcieSample(gen=gen, width=width, samples=count)

    def note(self, job_ran_load_stage: bool = False) -> str:
        """`job_ran_load_stage`: the finished job's journal shows rank 0 in the bandwidth stage,
        which can start and end between two polls of the wait loop (50 ms apart)."""
        if self.best:
            counts = {sample.samples for sample in self.best.values()}
            return f"sampled {max(counts)} times while the bandwidth stage ran"
        if self.error:
            return f"not sampled: {self.error}"
        if self.saw_load_stage:
            return "not sampled: the bandwidth stage ended before the first sample"
        if job_ran_load_stage:
            return "not sampled: the bandwidth stage started and ended between two polls of the job"
        return "not sampled: the job did not reach the bandwidth stage"


def ran_load_stage(job: JobFacts | None) -> bool:
    """Whether any rank of a finished job entered the bandwidth stage (None: no job facts)."""
    ranks = job.ranks if isinstance(job, JobFacts) else ()
    return any(rank.stage(LOAD_STAGE) is not None for rank in ranks)


def with_load_samples(
    topology: TopologyFacts, samples: dict[str, PcieSample], note: str
) -> TopologyFacts:
    gpus = tuple(
        dataclasses.replace(gpu, pcie_under_load=samples.get(str(normal_bus_id(gpu.pci_bus_id))))
        for gpu in topology.gpus
    )
    return dataclasses.replace(topology, gpus=gpus, under_load=note)


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
