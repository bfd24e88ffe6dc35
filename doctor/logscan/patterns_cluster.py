"""Log texts of the cluster around a job: a CUDA fault on a rank, a stuck watchdog, the
InfiniBand/RoCE and EFA transports (DDP512-DDP515). NCCL's own words for known causes and what
hosts and schedulers print when they kill a job follow in patterns_hosts.py.

Each wording was checked against its source: NCCL's transport/net_ib.cc (every version's
"Got completion" WARN), misc/ibvwrap.cc ("Call to ibv_%s failed"), misc/shmutils.cc,
enqueue.cc; torch's ProcessGroupNCCL.cpp (heartbeat monitor); aws-ofi-nccl's and libfabric's
WARN lines; slurmstepd, the kubelet and Ray's raylet as users pasted them (issue threads in the
comments, owner/repo#number).
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern

_RANK = (r"\[[Rr]ank ?(\d+)\]", r"\bRank (\d+)\]")
FAULT_TEXTS = (
    "an illegal memory access was encountered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
)


def _cut_fault_text(error: object) -> bool:
    """The start of a fault text, cut where the line was wrapped ("an illegal me")."""
    text = str(error or "")
    return any(fault.startswith(text) and fault != text for fault in FAULT_TEXTS)


CLUSTER_PATTERNS: tuple[Pattern, ...] = (
    # torch >= 2.2 heartbeat monitor (ProcessGroupNCCL.cpp): "[PG 0 Rank 1] Heartbeat monitor
    #   timed out! Process will be terminated after dumping debug info."; "ProcessGroupNCCL's
    #   watchdog got stuck for 600 seconds without making progress in monitoring enqueued
    #   collectives." (480 s from 2.4); "First PG on this rank that detected no heartbeat of
    #   its watchdog." (sgl-project/sglang#1691, hiyouga/LlamaFactory#8549)
    Pattern(
        "DDP513",
        "watchdog-stuck",
        (
            "watchdog got stuck for",
            "Heartbeat monitor timed out",
            "detected no heartbeat of its watchdog",
            # >= 2.4, the monitor's fatal line: "[PG ID 0 PG GUID 0(default_pg) Rank 1]
            #   Terminating the process after attempting to dump debug info, due to
            #   ProcessGroupNCCL watchdog hang." (warpem/miss-alignment#105, NVIDIA/Fuser#3055)
            "due to ProcessGroupNCCL watchdog hang",
        ),
        "[rank {rank}: ]ProcessGroupNCCL's watchdog made no progress[ for {seconds} s] and the "
        "heartbeat monitor killed the process: a NCCL or CUDA call it waits on hangs",
        fields={"rank": _RANK, "seconds": (r"stuck for (\d+) seconds",)},
        priority=1,
    ),
    # A faulted kernel, however it is reported: RuntimeError: CUDA error: an illegal memory
    # access was encountered; "Process group watchdog thread terminated with exception: CUDA
    # error: unspecified launch failure" (deepseek-ai/DeepSeek-MoE#47); NCCL enqueue.cc "NCCL
    # WARN Cuda failure 700 'an illegal memory access was encountered'"; Triton "Triton Error
    # [CUDA]: an illegal memory access"; thrust "cudaErrorIllegalAddress".
    Pattern(
        "DDP512",
        "cuda-fault-on-rank",
        (
            "an illegal memory access was encountered",
            "unspecified launch failure",
            "cudaErrorIllegalAddress",
            "misaligned address",
            "an illegal instruction was encountered",
            # the runtime's and the driver's names of the same faults (thrust: "cudaErrorLaunch
            #   Failure: unspecified launch failure"; torch's driver API: "CUDA driver error:
            #   CUDA_ERROR_ILLEGAL_ADDRESS"), and a kernel the driver's watchdog stopped
            #   (cudaErrorLaunchTimeout: "the launch timed out and was terminated")
            "cudaErrorLaunchFailure",
            "CUDA_ERROR_ILLEGAL_ADDRESS",
            "CUDA_ERROR_LAUNCH_FAILED",
            "the launch timed out and was terminated",
        ),
        "[rank {rank}: ]a CUDA kernel faulted ({error}); every later CUDA and NCCL call on "
        "that rank fails",
        fields={
            "rank": _RANK,
            "error": (
                r"(illegal memory access|unspecified launch failure|IllegalAddress|"
                r"misaligned address|illegal instruction|ILLEGAL_ADDRESS|LAUNCH_FAILED|"
                r"LaunchFailure|launch timed out)",
            ),
        },
    ),
    # The same fault in a line a terminal or an issue hard-wrapped inside its words: "Process
    #   group watchdog thread terminated with exception: CUDA error: an illegal me" / "mory
    #   access was encountered" (vllm-project/vllm#5537): the error text the line ends with
    #   is the start of one of the fault texts above.
    Pattern(
        "DDP512",
        "cuda-fault-on-rank",
        ("thread terminated with exception: CUDA error: ",),
        "[rank {rank}: ]a CUDA kernel faulted ({error}...); every later CUDA and NCCL call on "
        "that rank fails",
        fields={"rank": _RANK, "error": (r"exception: CUDA error: (.{6,}?)\s*$",)},
        accept=lambda evidence: _cut_fault_text(evidence.get("error")),
    ),
    # NCCL 2.4 - 2.6 (net_ib.cc): NET/IB : Got completion with error 12, opcode 1, len 0,
    #   vendor err 129;  2.7 - 2.19: NET/IB : Got completion from peer 10.0.0.2<54862> with
    #   error 12, opcode 0, len 0, vendor err 129 [(Recv) localGid ... remoteGids ...];
    #   2.2x: NET/IB : ... with status=12 opcode=0 len=0 vendor err 129 (Send);  newest:
    #   NET/IB: Got completion from peer ... with status=IBV_WC_RETRY_EXC_ERR(12) opcode=...
    #   (NVIDIA/nccl#426, #928, #1405, #1814). NET/IB "collective mismatch error, local size N
    #   remote size M" (#615, #969). UCX / libmlx5: "Transport retry count exceeded on
    #   mlx5_0:1/RoCE" (openucx/ucx#6000), "mlx5: host: got completion with error"; libibverbs'
    #   own status string for IBV_WC_RETRY_EXC_ERR, as UCX's verbs transports print it: "Send
    #   completion with error on qp 0x10e55: transport retry counter exceeded" (openucx/ucx#1880)
    Pattern(
        "DDP514",
        "ib-transport-error",
        (
            "Got completion from peer",
            "Got completion with error",
            "got completion with error",
            "Transport retry count exceeded",
            "transport retry counter exceeded",
            # libibverbs' ibv_wc_status_str for IBV_WC_RNR_RETRY_EXC_ERR (13)
            "RNR retry counter exceeded",
        ),
        "the InfiniBand/RoCE transport failed[: work completion status {status}][ (vendor "
        "error {vendor_err})][ talking to {peer}]",
        fields={
            "status": (r"(?:with error |status=)(?:\w+\()?(\d+)",),
            "vendor_err": (r"vendor[ _]err[= ]?(\d+)",),
            "peer": (r"from peer ([^\s<]+)<",),
        },
        collect=("peer",),
    ),
    Pattern(
        "DDP514",
        "ib-transport-error",
        (
            "collective mismatch error",
            "Got async event",
            "async fatal event",
            "Got async error event",
            # NCCL 2.28 (net_ib): "NET/IB : mlx5_0:1 GID table changed"; "NET/IB: Got CQE with
            #   error (devIndex=0, ...)"; "NET/IB: Fatal error. Detected 2 failed devices out of
            #   2 devices on the send communicator"; >= 2.19 "NET/IB : Attempted to connect
            #   incompatible devices: [0]mlx5_0:1/IB and [0]mlx5_2:1/RoCE"
            "GID table changed",
            "Got CQE with error",
            "failed devices out of",
            "Attempted to connect incompatible devices",
        ),
        "the InfiniBand transport reported {event}",
        fields={"event": (r"NET/IB ?: ((?:req [\d/]+ tag \w+ peer \S+ )?[^,.]+)",)},
        confirm=r"NET/IB",
    ),
    # NCCL >= 2.2x prints port events as "NET/IB : mlx5_0:1 Got non-fatal async event: port
    #   error(10)" (net_ib common.cc, 2.28); a port that went down or a GID table that changed
    #   breaks the queue pairs on it, while "port active" and the like are no errors.
    Pattern(
        "DDP514",
        "ib-transport-error",
        ("Got non-fatal async event",),
        "the InfiniBand transport reported {event}",
        fields={"event": (r"async event: ([\w ]+?)\s*(?:\(\d+\))?\s*$",)},
        confirm=r"non-fatal async event: (?:port error|GID table change)",
    ),
    # UCX's mlx5 transports (uct/ib/mlx5/ib_mlx5_log.c) print a failed completion by its
    #   syndrome: "UCX  ERROR Local protection on mlx5_0:1/IB (synd 0x4 vend 0x56 hw_synd 0/0)",
    #   "Remote access on ...", "Transport retry count exceeded on mlx5_0:1/RoCE (synd 0x15
    #   vend 0x81 hw_synd 0/0)" (openucx/ucx#6000): every one ends in a syndrome. (Anchored
    #   on UCX's level word, which has a character the prefilter already scans for.) Its IB
    #   memory domain's failed verbs calls: "ib_md.c:348  UCX  ERROR ibv_reg_mr(address=0x...,
    #   length=593920, access=0xf) failed: Cannot allocate memory" (uct/ib/base/ib_md.c)
    Pattern(
        "DDP514",
        "ib-transport-error",
        ("UCX  ERROR ",),
        "the InfiniBand/RoCE transport failed (UCX)[: {error}]",
        fields={
            "error": (
                r"ERROR\s+(.+?) on \w+:\d+/",
                r"ERROR\s+((?:ibv|mlx5dv)_\w+)\(.*\) failed",
            )
        },
        confirm=r"UCX\s+ERROR (?:.* on \w+:\d+/\w+ \(synd 0x|(?:ibv|mlx5dv)_\w+\(.*\) failed)",
    ),
    # The same syndrome lines from UCX's fatal-error path, with no level word (UCX 1.x):
    #   "[host:14791:0:14791] ib_mlx5_log.c:139  Remote QP on mlx5_0:1/IB (synd 0x14 vend 0x89
    #   hw_synd 0/0)", "ib_mlx5_log.c:177  Local protection on mlx5_0:1/IB (synd 0x4 ...)"
    #   (uct/ib/mlx5/ib_mlx5_log.c, uct_ib_mlx5_completion_with_err)
    Pattern(
        "DDP514",
        "ib-transport-error",
        ("ib_mlx5_log.c:",),
        "the InfiniBand/RoCE transport failed (UCX)[: {error}]",
        fields={"error": (r"ib_mlx5_log\.c:\d+\s+(.+?) on \w+:\d+/",)},
        confirm=r"ib_mlx5_log\.c:\d+\s+.+ on \w+:\d+/\w+ \(synd 0x",
    ),
    # libibverbs' work-completion status strings (ibv_wc_status_str), as a transport prints a
    #   failed completion: UCX's rc_verbs "rc_verbs_iface.c:63 FATAL: send completion with error:
    #   local protection error" (uct/ib/rc/verbs), ud_verbs' and Open MPI's openib "... completion
    #   with error on qp 0x...: remote access error". A flushed request ("Work Request Flushed
    #   Error") follows the first failure on a queue pair and is no cause by itself.
    Pattern(
        "DDP514",
        "ib-transport-error",
        ("completion with error: ", "completion with error on qp"),
        "the InfiniBand/RoCE transport failed: a work completion with {status}",
        fields={"status": (r"completion with error(?: on qp \w+)?: ([A-Za-z ]+?error)\b",)},
        confirm=r"(?i)completion with error(?: on qp \w+)?: (?:local (?:length|QP operation|"
        r"EE context operation|protection|access)|memory management operation|bad response|"
        r"remote (?:invalid request|access|operation)|fatal|general) error",
    ),
    # NCCL >= 2.2x's async thread (net_ib.cc / common.cc): "NET/IB : mlx5_1:1 async fatal event on QP
    #   (0x...): invalid request local work queue error" (NVIDIA/nccl#1919), "... async fatal event
    #   on CQ (...)", "... async fatal event: <str>" (device), "... Got async error event: port
    #   error" (non-fatal); older builds: "NET/IB : Got async event : local catastrophic error"
    #   (NVIDIA/nccl#230), "NET/IB : mlx5_0:1 Got async event : ..." (#1710).
    # misc/ibvwrap.cc (all versions): "Call to ibv_modify_qp failed with error Connection timed
    #   out" (NVIDIA/nccl#769), "... Network is unreachable" (NVIDIA/nccl-tests#185); >= 2.19:
    #   "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory" (nccl-tests#206)
    Pattern(
        "DDP514",
        "ib-transport-error",
        # NCCL 2.4 - 2.18 (include/ibvwrap.h): "ibv_post_send() failed with error Cannot
        #   allocate memory, Bad WR ..."; misc/ibvwrap.cc: "Call to ibv_poll_cq() returned -1"
        ("Call to ibv_", "ibv_post_send() failed", "ibv_post_recv() failed"),
        "an InfiniBand verbs call failed[: {call}][ ({error})]",
        fields={
            "call": (r"Call to (ibv_\w+)",),
            "error": (r"failed with error (.+?)\s*$",),
        },
        confirm=r"Call to ibv_\w+(?:\(\))? (?:failed|returned)|ibv_post_\w+\(\) failed",
    ),
    # aws-ofi-nccl: "NCCL WARN NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument"
    #   (aws/aws-ofi-nccl#24; 2019 builds print "WARN: Function: ... NET/OFI ..."), "NET/OFI OFI
    #   fi_getinfo() call failed: No data available" (#1020), "NET/OFI Request ... completed with
    #   error. RC: 21" (#161), "NET/OFI Could not find any optimal provider" (NVIDIA/nccl#229).
    #   Its INFO lines ("NET/OFI Selected Provider is efa") are not errors.
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        # anchored on "WARN" texts (with a C or an e the prefilter already scans for)
        ("NCCL WARN NET/OFI", "WARN: Function: "),
        "the AWS EFA / libfabric network plugin failed[: {message}]",
        fields={"message": (r"NET/OFI\s+(.+?)\s*$",)},
        confirm=r"NET/OFI",
        collect=("message",),
    ),
    # libfabric's EFA provider: "efa:cq:efa_rdm_txe_handle_error():737<warn> err: 5, message:
    #   Invalid address" (aws/aws-ofi-nccl#346), "rxr_cq_write_tx_error: err: 20" (#156),
    #   "FI_HMEM capability requires RDMA, which this device does not support" (#161)
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        (
            "efa_rdm_txe_handle_error",
            "rxr_cq_write_tx_error",
            "FI_HMEM capability requires",
            # libfabric >= 1.18 (prov/efa/src/rdm): efa_rdm_pke_handle_tx_error(),
            #   efa_rdm_rxe_handle_error(); 1.1x (rxr): rxr_cq_write_rx_error(); the EFA
            #   status text "Unresponsive receiver (reachable by EFA device but handshake
            #   failed)" (aws/aws-ofi-nccl#161)
            "efa_rdm_pke_handle_tx_error",
            "efa_rdm_rxe_handle_error",
            "rxr_cq_write_rx_error",
            "reachable by EFA device",
            # the provider's error-queue lines (efa_base_ep.c; 1.1x rxr.h prints the second to
            #   stderr before it aborts): "Writing error to EQ: err: Input/output error (5)
            #   prov_errno: ...", "Unable to write to EQ: ... prov_errno: ... prov/efa/src/rxr/
            #   rxr.h:1343" (ofiwg/libfabric#6249); rdm/efa_rdm_ope.c: "EFA provider internal
            #   txe failure err: 5, message: ..."
            "Writing error to EQ",
            "Unable to write to EQ",
            "EFA provider internal",
            # (a bare "prov/efa/src/" path is a source location, in a gdb stack of a working
            #  rank too: the next row asks it for an error word)
        ),
        "libfabric's EFA provider reported an error[: {message}]",
        fields={"message": (r"(?:message|warn>)\s*:?\s*(.+?)\s*$",)},
    ),
    # Any other error of libfabric's EFA provider, in its log format "libfabric:PID:TIME::efa:
    #   SUBSYS:function():LINE<warn> function: err: 12, message: Cannot allocate memory"
    #   (ofiwg/libfabric prov/efa: efa_rdm_ep_open, efa_av_insert_one ...): an "err: N" only,
    #   not the provider's advice warnings. (Anchored on ", message: ", which has a character
    #   the prefilter already scans for; the confirm asks for libfabric's EFA prefix.)
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        (", message: ",),
        "libfabric's EFA provider reported an error[: {message}]",
        fields={"message": (r"err: -?\d+, message: (.+?)\s*$",)},
        confirm=r"libfabric:\d+:(?:\d+::)?efa:\w+:.*<(?:warn|error)>.*err: -?\d+",
    ),
    # libfabric's EFA provider's own errors outside NCCL: printed with its source file, "Unable
    #   to write to EQ: Missing or unavailable event queue. err: Input/output error (5)
    #   prov_errno: Unknown error -12 (-12) prov/efa/src/rxr/rxr.h:1343" (ofiwg/libfabric#6249);
    #   its completion-queue warnings, "libfabric:20828:efa:cq:rxr_cq_handle_pkt_recv_completion()
    #   :1434<warn> invalid control pkt type 0" (ofiwg/libfabric#5716)
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        ("prov/efa/src/", ":efa:cq:"),
        "libfabric's EFA provider reported an error[: {message}]",
        fields={"message": (r"^\s*(.+?)\s+prov/efa/src/", r"<warn>\s*(.+?)\s*$")},
        confirm=r"(?:\berr(?:or)?\b|prov_errno).*prov/efa/src/|:efa:cq:.*<warn>",
        unless=("<info>", "<debug>", "<trace>"),
    ),
    # An application that asked libfabric for the EFA provider and got another: ps-lite's
    #   fabric van (BytePS) "Check failed: strcmp(ofi_provider_->fabric_attr->prov_name, "efa")
    #   == 0 couldn't get EFA as provider" (aws/libfabric#3). libfabric's own "fi_getinfo:
    #   provider X returned -61" lines before it are its search over every provider, no error;
    #   so is Open MPI's "EFA specific fi_getinfo(): No data available" on a host without EFA,
    #   after which it tries other providers (open-mpi/ompi#11412).
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        ("get EFA as provider",),
        "libfabric offered the application no EFA provider (the EFA device or its driver is "
        "missing here, or does not offer what was asked)",
        confirm=r"(?:couldn't|could not|cannot|unable to) get EFA as provider",
    ),
)
