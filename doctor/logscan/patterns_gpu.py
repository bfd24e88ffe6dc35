"""Log texts of a GPU that failed under the job: the NVIDIA driver's Xid lines (DDP236 for a
hardware or driver fault, DDP512 for the application's own kernel faulting), as the kernel log,
DCGM and NVML word them.

The numbers and their names are NVIDIA's: open-gpu-kernel-modules
src/common/sdk/nvidia/inc/nverror.h (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS = 79,
ROBUST_CHANNEL_GPU_ECC_DBE = 48, INFOROM_DRAM_RETIREMENT_EVENT / _FAILURE = 63 / 64,
EXCESSIVE_SBE_INTERRUPTS = 92, ROBUST_CHANNEL_CONTAINED_ERROR / UNCONTAINED_ERROR = 94 / 95,
PMU_HALT_ERROR = 62, NVLINK_ERROR = 74, GSP_RPC_TIMEOUT = 119, GSP_ERROR = 120, C2C_ERROR = 121;
ROBUST_CHANNEL_GR_EXCEPTION = 13, ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT = 31,
ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR = 43), NVIDIA's Xid catalog (docs.nvidia.com,
deploy/xid-errors: its resolution buckets, RESTART_APP for 13/31/43, a GPU reset or node
reboot for the others, and its "Xid 154 linkage" column) and its dynamic page retirement guide
(the XID 48 / 63 / 64 texts). The line format is the driver's nvErrorLog: "NVRM: Xid
(PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus." (older drivers:
"NVRM: Xid (0000:01:00): 79, ..."; pid and name are missing or '<unknown>' when no process).
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Evidence, Pattern
from ddp_doctor.model import Severity

XID_FATAL = frozenset({48, 62, 64, 74, 79, 94, 95, 119, 120, 121, 154})
XID_RESET_PENDING = frozenset({63, 92})  # the GPU still runs; it needs a reset to heal
XID_APPLICATION = frozenset({13, 31, 43})  # the catalog's RESTART_APP: the job's own kernel
_NVRM = ("NVRM: Xid (",)
_XID_NUMBER = (r"NVRM: Xid \([^)]*\):? ?(\d+)\b",)
_DEVICE = (r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})",)
# the text after "N, pid=..., name=..., " (each part optional)
_DETAIL = (r"NVRM: Xid \([^)]*\):? ?\d+, (?:pid='?[^,]*'?, )?(?:name=[^,]*, )?(.{4,160}?)\s*$",)
_FIELDS = {"xid": _XID_NUMBER, "device": _DEVICE, "detail": _DETAIL}


def _xid_in(numbers: frozenset[int]):
    def accept(evidence: Evidence) -> bool:
        return evidence.get("xid") in numbers

    return accept


GPU_PATTERNS: tuple[Pattern, ...] = (
    # Xid 79: "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus." (osinit.c's
    #   osHandleGpuLost, every driver since 3xx); the driver's own next line, "NVRM: GPU
    #   0000:2b:00.0: GPU has fallen off the bus.", and older drivers' "NVRM: GPU at
    #   0000:01:00.0 has fallen off the bus." say the same without the Xid.
    Pattern(
        "DDP236",
        "gpu-xid-fault",
        (*_NVRM, "has fallen off the bus"),
        "the GPU[ at PCI {device}] fell off the bus (Xid 79): the driver lost it, and every "
        "CUDA call of the ranks on it fails",
        fields={"xid": _XID_NUMBER, "device": (*_DEVICE, r"GPU (?:at )?([0-9A-Fa-f:.]{7,})")},
        confirm=r"NVRM: .*(?:Xid \([^)]*\):? ?79\b|has fallen off the bus)",
        priority=3,
    ),
    # The other hardware and driver faults, by number: 48 "An uncorrectable double bit error
    #   (DBE) has been detected on GPU in the framebuffer at partition 5, subpartition 1."; 94
    #   "Contained: SM (0x1). RST: No, D-RST: No" / "Contained ECC error."; 95 "Uncontained:
    #   FBHUB. RST: Yes, D-RST: No"; 64 "Dynamic Page Retirement: Fatal error, unable to retire
    #   page"; 74 "NVLink: fatal error detected on link 5(0x10000, 0x0, ...)"; 119 "Timeout
    #   after 6s of waiting for RPC response from GPU1 GSP! Expected function 76
    #   (GSP_RM_CONTROL) (0x20802a02 0x8)." (kernel_gsp.c, GSP_RPC_TIMEOUT_XID_MESSAGE_FMT);
    #   120 "GSP task exception: load access fault"; 154 "GPU recovery action changed from
    #   0x0 (None) to 0x1 (Reset)".
    Pattern(
        "DDP236",
        "gpu-xid-fault",
        _NVRM,
        "the NVIDIA driver logged Xid {xid}, a GPU hardware or driver fault[ on the GPU at "
        "PCI {device}][: {detail}]",
        fields=_FIELDS,
        accept=_xid_in(XID_FATAL),
        priority=2,
    ),
    # 63 "Row Remapper: New row marked for remapping, reset gpu to activate." (Ampere and
    #   newer; stas00/ml-engineering compute/accelerator/nvidia/debug.md quotes one from a
    #   training node), before Ampere "Dynamic Page Retirement: New retired page, reload the
    #   driver to activate."; 92 "High single-bit ECC error rate": memory the GPU corrected or
    #   set aside, a reset away from healed. The application that hit the error failed; the
    #   GPU itself still runs.
    Pattern(
        "DDP236",
        "gpu-xid-fault",
        _NVRM,
        "the NVIDIA driver logged Xid {xid}, GPU memory errors that need a GPU reset[ on the "
        "GPU at PCI {device}][: {detail}]",
        fields=_FIELDS,
        accept=_xid_in(XID_RESET_PENDING),
        severity=Severity.WARNING,
    ),
    # DCGM's health checks and diagnostics (dcgm_errors.h, DCGM_FR_XID_ERROR_MSG): "Detected
    #   XID 79 for GPU 3"; NVML's nvmlErrorString(NVML_ERROR_RESET_REQUIRED), as nvidia-smi and
    #   pynvml print it: "GPU requires reset".
    Pattern(
        "DDP236",
        "gpu-xid-fault",
        ("Detected XID ",),
        "DCGM detected Xid {xid}, a GPU hardware or driver fault[, on GPU {gpu}]",
        fields={"xid": (r"Detected XID (\d+)",), "gpu": (r"Detected XID \d+ for GPU (\d+)",)},
        accept=_xid_in(XID_FATAL | XID_RESET_PENDING),
        priority=1,
    ),
    Pattern(
        "DDP236",
        "gpu-xid-fault",
        ("GPU requires reset",),
        "NVML reports that the GPU requires a reset (a fault left it unusable)",
    ),
    # nvidia-smi on a GPU the driver lost (NVML_ERROR_GPU_IS_LOST): "Unable to determine the
    #   device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this
    #   GPU"; pynvml raises it as NVMLError_GPUIsLost. (Its other ending, ": Unknown Error",
    #   also follows a driver/library mismatch or a GPU the BIOS hid: no row.)
    Pattern(
        "DDP236",
        "gpu-xid-fault",
        ("Reboot the system to recover this GPU", "NVMLError_GPUIsLost"),
        "the driver lost the GPU[ at PCI {device}] (NVML: GPU is lost): reboot to recover it",
        fields={
            "device": (
                r"device handle for GPU ?\d*:? ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)",
            )
        },
        priority=2,
    ),
    # 13 "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address" / "Graphics
    #   Exception: ESR 0x50..."; 31 "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS
    #   GPCCLIENT_T1_0 faulted @ 0x7f13_d4000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ";
    #   43 "pid=..., Ch 00000008": the catalog's RESTART_APP, a fault of the job's own kernel
    #   (an out-of-range index, a bad pointer) that the driver saw. The same fault as torch's
    #   "an illegal memory access was encountered" on the rank.
    Pattern(
        "DDP512",
        "cuda-fault-on-rank",
        _NVRM,
        "[rank {rank}: ]a CUDA kernel faulted (the driver's Xid {xid}[: {detail}]); every "
        "later CUDA and NCCL call on that rank fails",
        fields=_FIELDS,
        accept=_xid_in(XID_APPLICATION),
    ),
)
