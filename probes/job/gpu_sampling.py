"""NVML samples of GPUs' memory and utilisation, taken in a thread while another process works.

What users do with `nvidia-smi -l 1` to see whether every GPU takes part, every 50 ms. NVML
averages utilisation over a window of 1/6 s to 1 s (nvmlUtilization_t), so the work sampled
must last about a second to show. The pynvml module is passed in: tests hand a fake here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any

from ddp_doctor.facts.job import DataParallelGpu

INTERVAL_S = 0.05


class SamplingUnavailable(Exception):
    """NVML could not start, or a GPU could not be opened: nothing is sampled."""


@dataclass
class _Track:
    """The running minimum and maxima of one GPU's samples."""

    nvml_index: int
    pci_bus_id: str
    handle: Any
    samples: int = 0
    memory_min: int | None = None
    memory_max: int | None = None
    utilization_max: int | None = None

    def add(self, memory_used: int | None, utilization: int | None) -> None:
        self.samples += 1
        if memory_used is not None:
            self.memory_min = _lower(self.memory_min, memory_used)
            self.memory_max = _higher(self.memory_max, memory_used)
        if utilization is not None:
            self.utilization_max = _higher(self.utilization_max, utilization)

    def result(self) -> DataParallelGpu:
        return DataParallelGpu(
            nvml_index=self.nvml_index,
            pci_bus_id=self.pci_bus_id,
            samples=self.samples,
            memory_used_min_bytes=self.memory_min,
            memory_used_max_bytes=self.memory_max,
            utilization_gpu_max_percent=self.utilization_max,
        )


class NvmlSampler:
    """`with NvmlSampler(pynvml, [0, 1]) as sampler:` samples GPUs 0 and 1 (NVML indices) once
    on entry, every `interval_s` in a thread, and once more on exit; `results()` after."""

    def __init__(
        self, nvml: ModuleType, indices: Sequence[int], interval_s: float = INTERVAL_S
    ) -> None:
        self.nvml = nvml
        self.indices = list(indices)
        self.interval_s = interval_s
        self.tracks: list[_Track] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as error:
            raise SamplingUnavailable(f"NVML could not start: {error}") from None
        try:
            self.tracks = [self._open(index) for index in self.indices]
        except self.nvml.NVMLError as error:
            self._shutdown()
            raise SamplingUnavailable(f"NVML could not open a GPU: {error}") from None
        self.sample_once()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample_once()  # after the work: memory back at its floor
        self._shutdown()

    def sample_once(self) -> None:
        for track in self.tracks:
            memory = self._query(lambda t=track: self.nvml.nvmlDeviceGetMemoryInfo(t.handle).used)
            busy = self._query(
                lambda t=track: self.nvml.nvmlDeviceGetUtilizationRates(t.handle).gpu
            )
            track.add(memory, busy)

    def results(self) -> tuple[DataParallelGpu, ...]:
        return tuple(track.result() for track in self.tracks)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def _open(self, index: int) -> _Track:
        handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        bus = self.nvml.nvmlDeviceGetPciInfo(handle).busId
        return _Track(index, bus.decode() if isinstance(bus, bytes) else str(bus), handle)

    def _query(self, call: Callable[[], Any]) -> int | None:
        """NotSupported (utilisation on MIG, vGPU) or a GPU lost mid-way: no value, not a crash."""
        try:
            return int(call())
        except self.nvml.NVMLError:
            return None

    def _shutdown(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


def _lower(current: int | None, value: int) -> int:
    return value if current is None else min(current, value)


def _higher(current: int | None, value: int) -> int:
    return value if current is None else max(current, value)
