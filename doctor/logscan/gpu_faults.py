"""A GPU that failed (DDP236, the driver's Xid) comes before what its failure caused.

The kernel log and the job's log are two clocks: a dmesg excerpt is usually pasted after the
traceback, though the Xid came first. So whatever the lines' order, once the log holds a
hardware or driver Xid, the ranks' CUDA errors ("unspecified launch failure", "an illegal
memory access"), NCCL's "unhandled cuda error", the watchdog's aborts and timeouts, the
crashed ranks and the peers that saw them go are reported after it, as its consequences.
Out-of-memory errors (host or GPU) are left alone: they have causes of their own.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from ddp_doctor.logscan.aggregate import CodeTally
from ddp_doctor.logscan.pattern import Role

GPU_FAULT = "DDP236"
AFTER_A_GPU_FAULT = (
    "DDP512",  # the CUDA error every call on the lost GPU returns
    "DDP508",  # NCCL's "unhandled cuda error" / system error from the same calls
    "DDP503",  # NCCL WARN lines ("Cuda failure 'unknown error'")
    "DDP513",  # the watchdog stuck in a CUDA call on the lost GPU
    "DDP302",  # the other ranks' collectives that never completed
    "DDP307",  # the rank that died of it
    "DDP234",  # peers that saw it leave
    "DDP206",
    "DDP514",
    "DDP515",
)


def gpu_fault_first(tallies: MutableMapping[str, CodeTally]) -> None:
    fault = tallies.get(GPU_FAULT)
    if fault is None or fault.role != Role.CAUSE:
        return
    for code in AFTER_A_GPU_FAULT:
        tally = tallies.get(code)
        if tally is not None and tally.role == Role.CAUSE:
            tally.judge(
                role=Role.SYMPTOM,
                note=f"a consequence of {GPU_FAULT} (line {fault.first_line}): the GPU failed",
            )
