"""DDP512-DDP515: a CUDA fault on a rank, a stuck watchdog, and fabric transport errors that
only a log shows. The pattern table (patterns_fabric.py) emits them."""

from __future__ import annotations

from ddp_doctor.model import Remediation
from ddp_doctor.registry import describe

describe(
    "DDP512",
    Remediation(
        "Find the kernel that faulted: rerun one rank with CUDA_LAUNCH_BLOCKING=1 (and "
        "compute-sanitizer if it reproduces) so the error points at the op that caused it. "
        "Common causes: out-of-range indices into an embedding or a gather, a custom or "
        "Triton kernel, mismatched library builds (flash-attn, NCCL) for the GPU. Check the "
        "host's kernel log for Xid errors (a failing GPU) when it happens at random steps.",
        ("CUDA_LAUNCH_BLOCKING=1 torchrun --nproc-per-node=N train.py",),
    ),
    """What it finds: "an illegal memory access was encountered", "unspecified launch failure",
"misaligned address" or "an illegal instruction was encountered", as torch raises it
(RuntimeError: CUDA error: ...), as the NCCL watchdog reports it ("Process group watchdog
thread terminated with exception: CUDA error: ..."), as NCCL's own WARN line says it ("Cuda
failure 700 'an illegal memory access was encountered'") or as Triton and thrust word it, and
the runtime's and driver's names (cudaErrorLaunchFailure, CUDA_ERROR_ILLEGAL_ADDRESS) and a
kernel the driver stopped ("the launch timed out and was terminated").
Why it matters: a faulted kernel poisons the rank's CUDA context; every later CUDA and NCCL
call on it fails, the watchdog kills it and the other ranks see a dead peer or a timeout.
The cause is the faulting kernel, not NCCL.
Example: an index past the vocabulary in an embedding; a flash-attention build for another
GPU; a GPU that fell off the bus (Xid 79) mid-run.
Fix: CUDA_LAUNCH_BLOCKING=1 to find the kernel, then the input or the build it needs.""",
)

describe(
    "DDP513",
    Remediation(
        "Find what blocked the watchdog: dump the stacks of the stuck rank (py-spy dump --pid "
        "PID --native) while it hangs, or set TORCH_NCCL_DUMP_ON_TIMEOUT=1 for a flight "
        "recorder dump. Usual causes: a collective that never completes because a rank is "
        "elsewhere (uneven data, a rank-only branch), a CUDA call blocked by a hung kernel, or "
        "a thread holding the GIL. Only when the work is known to be long raise "
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC.",
        ("py-spy dump --native --pid PID",),
    ),
    """What it finds: the heartbeat monitor's "ProcessGroupNCCL's watchdog got stuck for N seconds
without making progress in monitoring enqueued collectives" (torch >= 2.2), its
"Heartbeat monitor timed out! Process will be terminated after dumping debug info", "First
PG on this rank that detected no heartbeat of its watchdog" and its last line, "Terminating
the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang".
Why it matters: it is not a collective timeout: the watchdog thread itself made no progress
for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (480 or 600 s), because a NCCL or CUDA call it waits on
(cudaEventQuery, cudaEventDestroy, ncclCommAbort) hangs, so the monitor kills the process.
With a collective timeout (DDP302) in the same log it is that timeout's consequence (the abort
after it hung) and is reported after it.
Example: ranks deadlocked in a collective at the end of an epoch; a CUDA call hanging after
training finished, while the process groups are torn down.
Fix: the stacks of the stuck rank say which call blocked; fix that hang.""",
)

describe(
    "DDP514",
    Remediation(
        "Test the fabric below NCCL between the two hosts named (ib_write_bw / ib_send_bw with "
        "the same GID index), check the port state (ibstat, ibv_devinfo) and the RoCE GID table "
        "(show_gids): set NCCL_IB_GID_INDEX to a routable RoCE v2 GID, NCCL_IB_HCA to the HCAs "
        "that are cabled, raise the locked-memory limit (ulimit -l unlimited) where memory "
        "registration fails. NCCL_IB_DISABLE=1 confirms it is the fabric, at a cost in speed.",
        ("ibv_devinfo", "show_gids", "ib_write_bw -d mlx5_0 -x 3 <peer>"),
    ),
    """What it finds: NCCL's NET/IB work-completion errors in every version's wording ("Got
completion with error 12, opcode 1, len 0, vendor err 129", "Got completion from peer
10.0.0.2<1234> with status=12 opcode=... vendor err 129 (Send) localGid ... remoteGids ...",
the 2.2x "NET/IB: Got completion from peer ... with status=IBV_WC_RETRY_EXC_ERR(12)"), "Call to
ibv_modify_qp failed" / "ibv_reg_mr ... failed" (a queue pair that cannot connect, memory that
cannot be registered), NET/IB "collective mismatch error" (sizes that disagree on the wire),
"Got async event : GID table change" (2.28: "GID table changed", "Got non-fatal async event:
port error", "Got CQE with error", "Detected N failed devices"), "ibv_post_send() failed",
UCX's mlx5 syndromes ("UCX  ERROR Local protection on mlx5_0:1/IB (synd 0x4 ...)", or
"ib_mlx5_log.c:139  Remote QP on mlx5_0:1/IB (synd 0x14 ...)" from its fatal path),
UCX/libmlx5's "Transport retry count exceeded", and libibverbs' work-completion statuses as a
transport prints them ("send completion with error: local protection error", "transport retry
counter exceeded"; a flushed request is a consequence).
Why it matters: the RDMA transport itself failed; status 12 (retry exceeded) is a timeout
between two NICs that cannot talk (routing, RoCE GID, a switch, a link), status 4 a local
protection error (often GPU Direct RDMA), status 5 a flushed request after an earlier error.
NCCL returns a system or remote error and torch reports "unhandled system error" or a timeout.
Example: RoCE with NCCL_IB_GID_INDEX unset, so NCCL takes the link-local GID and every send
times out (NVIDIA/nccl#426, #769).
Fix: make the fabric work below NCCL (perftest), then the GID index, HCA list and limits.""",
)

describe(
    "DDP515",
    Remediation(
        "Check that the EFA devices reach the process (`fi_info -p efa -t FI_EP_RDM` inside "
        "the container; docker needs --device /dev/infiniband/uverbs*), that the libfabric "
        "and aws-ofi-nccl come from one EFA installer matching the NCCL, and that the "
        "security group allows all traffic between the instances. FI_LOG_LEVEL=warn and "
        "NCCL_DEBUG=INFO show the failing libfabric call.",
        ("fi_info -p efa -t FI_EP_RDM",),
    ),
    """What it finds: WARN lines of the aws-ofi-nccl plugin ("NET/OFI Couldn't open AV", "NET/OFI
OFI fi_getinfo() call failed: No data available", "NET/OFI Could not find any optimal
provider", "NET/OFI Request ... completed with error", "Creating new endpoint ... failed") and
libfabric's own EFA errors with no NET/OFI prefix ("efa:cq ... err: 5, message: Invalid
address", "rxr_cq_write_tx_error", "Writing error to EQ" / "Unable to write to EQ ...
prov/efa/src/...", "EFA provider internal txe failure", "FI_HMEM capability requires RDMA"),
and an application's own check that libfabric gave it EFA (ps-lite's "couldn't get EFA as
provider"); libfabric's "provider X returned -61" lines are its search over every provider, no
error by themselves.
Why it matters: the network plugin NCCL uses on AWS failed; NCCL hangs, falls back to
sockets, or fails with an internal or remote error.
Example: a container started without the /dev/infiniband devices, so fi_getinfo finds no EFA
provider (aws/aws-ofi-nccl#1020); a security group that blocks EFA traffic (#156).
Fix: devices, matching libfabric/plugin/NCCL versions, an open security group.""",
)
