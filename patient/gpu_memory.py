"""Which process holds how much memory on which GPU, from NVML, during the job."""

from __future__ import annotations

from typing import Any


def processes_per_gpu() -> list[dict[str, Any]]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:
        return [{"error": f"NVML unavailable: {error}"}]
    rows = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        try:
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError:
            running = []
        for process in running:
            rows.append(
                {
                    "gpu": index,
                    "pci_bus_id": bus,
                    "pid": int(process.pid),
                    "used_bytes": process.usedGpuMemory,
                }
            )
    return rows
