"""DDP236: a GPU hardware or driver fault the NVIDIA driver logged as an Xid. The pattern table
(patterns_gpu.py) emits it."""

from __future__ import annotations

from ddp_doctor.model import Remediation
from ddp_doctor.registry import describe

describe(
    "DDP236",
    Remediation(
        "Take the node (or the GPU) out of the job and look at it: `nvidia-smi -q -d "
        "ECC,ROW_REMAPPER,PAGE_RETIREMENT` for memory errors and pending remaps, `dmesg -T | "
        "grep -i xid` for the whole sequence. Xid 63/94 (a row marked for remapping, a "
        "contained ECC error): restart the application, reset the GPU when it is idle "
        "(`nvidia-smi -r -i N`). Xid 48/95/64 or a GPU that fell off the bus (79): drain the "
        "node, reset or reboot; if it returns, run `dcgmi diag -r 3` and replace the GPU. Xid "
        "119/120 (GSP): reboot, then update the driver. Xid 74 (NVLink): check `nvidia-smi "
        "nvlink -s` and reset the GPUs. Resuming the job elsewhere from its last checkpoint is "
        "the immediate way out.",
        ("dmesg -T | grep -i xid", "nvidia-smi -q -d ECC,ROW_REMAPPER", "dcgmi diag -r 3"),
    ),
    """What it finds: the NVIDIA driver's kernel-log lines "NVRM: Xid (PCI:0000:3b:00): N, pid=...,
name=..., <text>" (dmesg, the journal, or pasted into a training log; older drivers print
"NVRM: Xid (0000:3b:00): N, ...") whose number is a hardware or driver fault: 79 (the GPU has
fallen off the bus), 48 (a double-bit ECC error), 63 and 64 (a row marked for remapping or a
page retired, and a remapping or retirement that failed), 92 (excessive single-bit ECC
interrupts), 94 and 95 (a contained and an uncontained ECC error), 62 (the PMU halted), 74
(an NVLink error), 119 and 120 (the GSP firmware timed out or failed), 121 (a C2C link
error), 154 (the driver asks for a GPU reset or a node reboot); DCGM's "Detected XID N for
GPU M" of the same numbers; NVML's "GPU requires reset" and nvidia-smi's "GPU is lost.  Reboot
the system to recover this GPU". Xid 13, 31 and 43 (a graphics
engine exception, a GPU memory page fault, a stopped channel) are the application's own
kernel faulting: those are DDP512. Other numbers (video engines, display) say nothing of a
training job and stay silent.
Why it matters: the GPU itself failed, not the training code. Every CUDA call on it fails
("unspecified launch failure", "an illegal memory access", "uncorrectable ECC error
encountered", "unknown error"), NCCL reports "unhandled cuda error", the watchdog aborts the
rank and the other ranks time out or see a closed peer: all of that follows from the Xid. A
rerun on the same GPU fails again, at random steps.
Example: "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for
remapping, reset gpu to activate." in a node's journal beside a loss spike and a crash; "Xid
(PCI:0000:b3:00): 79, pid=..., GPU has fallen off the bus." followed by every rank on that
node failing with "CUDA error: unspecified launch failure".
Fix: drain the node, reset the GPU (or reboot), check ECC and row remapping with nvidia-smi
and dcgmi diag; replace a GPU whose errors return; resume from the last checkpoint elsewhere.
Sources: the Xid numbers and their names are NVIDIA's (open-gpu-kernel-modules
src/common/sdk/nvidia/inc/nverror.h; NVIDIA's Xid catalog and the dynamic page retirement
guide on docs.nvidia.com).""",
)
