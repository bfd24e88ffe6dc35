"""More NCCL NET/IB WARN texts of a fabric that failed (DDP514), and the schedulers' remaining
ways of stopping a job from outside (DDP507): LSF's termination reasons, Kubernetes' deadline
and preemption, Flux's exceptions.

Each NET/IB wording was read in NCCL's own sources, tag by tag (NVIDIA/nccl
src/transport/net_ib.cc up to 2.22, src/transport/net_ib/*.cc from 2.23, src/misc/ibvwrap.cc:
v2.4.8 v2.7.8 v2.9.9 v2.12.12 v2.15.5 v2.18.6 v2.19.4 v2.21.5 v2.23.4 v2.25.1 v2.27.7
v2.28.9); the rows the older table already had are in patterns_cluster.py. The INFO lines of a
healthy run ("GPU Direct RDMA Disabled for HCA ... (no module)", "DMA-BUF is available", "NET/IB
: Using [0]mlx5_0:1/IB") match no row here: they are no failure.
"""

from __future__ import annotations

from ddp_doctor.logscan.pattern import Pattern, Role
from ddp_doctor.model import Severity

FABRIC_PATTERNS: tuple[Pattern, ...] = (
    # NET/IB texts of a transport that cannot work as configured or broke, WARN and an error
    #   return in NCCL: 2.21 - 2.25 "NET/IB : Can't merge net devices with different link_layer.
    #   i=0 remMeta.ndevs=2 link_layer=1 rem_link_layer=2", 2.25 "Can't connect net devices
    #   with different link_layer", "Trying to merge multiple devices together with different
    #   link_layer properties"; >= 2.27 "NET/IB : Attempted to merge incompatible devices:
    #   [0]mlx5_0:1/IB and [1]mlx5_2:1/RoCE. Try selecting NICs of only one link type using
    #   NCCL_IB_HCA", "NET/IB : Remote mlx5_0 device is incompatible with the local
    #   [0]mlx5_2:1/RoCE"; 2.12 - 2.28 "NET/IB : req 3/8 tag 7 peer 10.0.0.2<4321> posted
    #   incorrect receive info: size 4096 addr 7f0000 rkey[s] ..."; >= 2.23 (async events on):
    #   "communicator encountered a fatal error (detected in ncclIbIsend)"; >= 2.23 RoCE GID
    #   selection: "NET/IB: open failed in ncclIbRoceGetVersionNum: No such file or directory"
    #   (the GID type file under /sys/class/infiniband cannot be read).
    Pattern(
        "DDP514",
        "ib-transport-error",
        (
            "with different link_layer",
            "merge incompatible devices",
            "is incompatible with the local",
            "posted incorrect receive info",
            "communicator encountered a fatal error",
            "in ncclIbRoceGetVersionNum",
        ),
        "the InfiniBand/RoCE transport failed: {event}",
        fields={
            "event": (
                r"NET/IB ?: ?(.{8,200}?)(?:\.? Try selecting|\s*$)",
                r"(communicator encountered a fatal error[^\n]*?)\s*$",
            )
        },
        confirm=r"NET/IB|communicator encountered a fatal error \(detected in ncclIb",
    ),
    # NET/IB devices NCCL could not open or query at init ("NET/IB : Unable to open device
    #   mlx5_1", "NET/IB : Unable to query device mlx5_1", "Unable to query port 1" (2.4 - 2.19),
    #   "Unable to query port_num 1" (>= 2.21)): NCCL skips the device and goes on with the
    #   others, or with sockets; worth knowing (a container without /dev/infiniband, a port
    #   down), not a failure by itself.
    Pattern(
        "DDP514",
        "ib-transport-error",
        ("Unable to open device", "Unable to query device", "Unable to query port"),
        "NCCL could not use an InfiniBand/RoCE device[: {event}] (it was skipped)",
        fields={"event": (r"NET/IB ?: ?(.{8,120}?)\s*$",)},
        confirm=r"NET/IB",
        role=Role.NOTE,
        severity=Severity.WARNING,
    ),
    # libfabric's EFA provider's warnings outside its completion queue (the cq ones are in
    #   patterns_cluster.py), in its log format "libfabric:PID:TIME::efa:SUBSYS:function():LINE
    #   <warn> text" (ofiwg/libfabric src/log.c; subsystems core, domain, ep_ctrl, ep_data, av,
    #   mr): "efa:av:efa_conn_alloc_explicit():292<warn> Failed to insert fi_addr 3 ...", "efadv_query_ah
    #   failed! err: 22", "Failed to get current EFA's GID, errno: 2" (prov/efa/src/efa_conn.c,
    #   efa_ah.c), "efa:core:...<warn> Failed to allocate ibv pd: 12" (efa_fork_support.c). Only
    #   a warning that says something failed; "Disabling EFA shared memory support; ..." is the
    #   provider going on without shm, and info or debug lines are no errors.
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        (":efa:av:", ":efa:core:", ":efa:domain:", ":efa:ep_ctrl:", ":efa:ep_data:", ":efa:mr:"),
        "libfabric's EFA provider reported an error[: {message}]",
        fields={"message": (r"<warn>\s*(.+?)\s*$",)},
        confirm=r"libfabric:\d+:.*:efa:\w+:.*<warn>.*(?i:fail|unable|cannot|error|invalid)",
        unless=("Disabling EFA shared memory",),
    ),
    # LSF's termination reasons (IBM Spectrum LSF "Termination reasons displayed by bacct,
    #   bhist, and bjobs"), as the job report prints them, "TERM_FORCE_OWNER: job killed by
    #   owner without time for cleanup."; the older row (patterns_jobs.py) has TERM_RUNLIMIT,
    #   TERM_OWNER, TERM_PREEMPT, TERM_ADMIN, and TERM_MEMLIMIT is memory (patterns_hosts.py).
    #   Kubernetes: the job controller's "Job was active longer than specified deadline"
    #   (reason DeadlineExceeded; Kubeflow's training operator: "Job x has failed because it
    #   was active longer than specified deadline"), the scheduler's event on a preempted pod
    #   "Preempted by pod 9d25b95... on node worker-0" (pkg/scheduler/framework/preemption).
    #   Flux (flux-framework/flux-core, as `flux run` prints a job's exception):
    #   "job.exception type=timeout severity=0 resource allocation expired", and
    #   "job.exception type=cancel" after `flux cancel`.
    Pattern(
        "DDP507",
        "job-cancelled",
        (
            "TERM_FORCE_OWNER",
            "TERM_FORCE_ADMIN",
            "TERM_CPULIMIT",
            "TERM_DEADLINE",
            "TERM_EXTERNAL_SIGNAL",
            "TERM_BUCKET_KILL",
            "TERM_LOAD:",  # (the colon: a 9-letter anchor would cost the prefilter a pass)
            "TERM_KUBE:",
            "TERM_MC_RECALL",
            "TERM_CHKPNT",
            "active longer than specified deadline",
            "Preempted by pod ",
            "job.exception type=timeout",
            "job.exception type=cancel",
            # OpenPBS's MOM (src/resmom/mom_main.c job_over_limit, "=>> PBS: job killed: %s"):
            #   "ncpus 8.3 exceeded limit 8 (burst)", "cput 3601 exceeded limit 3600", "spool
            #   usage job total 2048KB exceeded limit 1024KB" (walltime is patterns_jobs.py's,
            #   mem/vmem/pmem memory's)
            "PBS: job killed: ncpus",
            "PBS: job killed: cput",
            "PBS: job killed: spool",
        ),
        "the job was stopped from outside ({reason})",
        fields={
            "reason": (
                r"(TERM_[A-Z_]+)",
                r"(active longer than specified deadline|Preempted by pod)",
                r"job\.exception (type=\w+)",
                r"PBS: job killed: (\w+)",
            ),
        },
    ),
    # libibverbs' own names of a failed work completion (rdma-core libibverbs/verbs.h, enum
    #   ibv_wc_status), as programs that are not NCCL print them: "RECV 93B246F7.0.169 failed:
    #   IBV_WC_RETRY_EXC_ERR" (ydb-platform/nbs#4533). NCCL's own completion lines are the
    #   patterns_cluster.py row's; IBV_WC_WR_FLUSH_ERR only follows the first failure on a queue
    #   pair and IBV_WC_SUCCESS is none, so neither is confirmed.
    Pattern(
        "DDP514",
        "ib-transport-error",
        (  # each name whole: a bare "IBV_WC_" would cost the prefilter a pass of its own
            "IBV_WC_LOC_LEN_ERR",
            "IBV_WC_LOC_QP_OP_ERR",
            "IBV_WC_LOC_EEC_OP_ERR",
            "IBV_WC_LOC_PROT_ERR",
            "IBV_WC_MW_BIND_ERR",
            "IBV_WC_BAD_RESP_ERR",
            "IBV_WC_LOC_ACCESS_ERR",
            "IBV_WC_REM_INV_REQ_ERR",
            "IBV_WC_REM_ACCESS_ERR",
            "IBV_WC_REM_OP_ERR",
            "IBV_WC_RETRY_EXC_ERR",
            "IBV_WC_RNR_RETRY_EXC_ERR",
            "IBV_WC_LOC_RDD_VIOL_ERR",
            "IBV_WC_REM_INV_RD_REQ_ERR",
            "IBV_WC_REM_ABORT_ERR",
            "IBV_WC_INV_EECN_ERR",
            "IBV_WC_INV_EEC_STATE_ERR",
            "IBV_WC_FATAL_ERR",
            "IBV_WC_RESP_TIMEOUT_ERR",
            "IBV_WC_GENERAL_ERR",
        ),
        "the InfiniBand/RoCE transport failed: a work completion with {status}",
        fields={"status": (r"\b(IBV_WC_\w+_ERR)\b",)},
        confirm=r"\bIBV_WC_[A-Z_]+_ERR\b",  # a whole name, not a longer word
    ),
    # aws-ofi-nccl's WARN texts as torch repeats them after NCCL's "Last error:", without
    #   "NCCL WARN" in front: "[rank1]: Last error: / [rank1]: NET/OFI Unable to insert remote
    #   address into address vector for device 1. RC: 0" (aws/aws-ofi-nccl#663). The plugin's
    #   own failure words (src/nccl_ofi_*.c: "Couldn't open AV", "Could not create Libfabric
    #   endpoint", "OFI fi_getinfo() call failed", "Request ... completed with error",
    #   "initialization failed", "Unable to register memory") after its NET/OFI prefix; its INFO
    #   lines ("NCCL INFO NET/OFI Selected provider is efa") are not confirmed.
    Pattern(
        "DDP515",
        "efa-libfabric-error",
        (
            "Couldn't ",
            "Could not ",
            "call failed",
            "completed with error",
            "nccl initialization failed",
            "Unable to insert",
            "Unable to register",
            "requires at least libfabric",
            "couldn't be configured",
        ),
        "the AWS EFA / libfabric network plugin failed[: {message}]",
        fields={"message": (r"NET/OFI\s+(.+?)\s*$",)},
        confirm=r"(?<!INFO )NET/OFI ",
        collect=("message",),
    ),
)
