"""The one table of known log texts: `ddp-doctor logs` and the job probes read it alike.

Order matters: a line belongs to the first pattern that matches it, so specific texts come
before generic ones (a "NCCL WARN Duplicate GPU detected" line is DDP305, not DDP503; a store
error that ends in "Connection reset by peer" is the store's, not any closed connection's).
Each pattern matches stable substrings, never whole lines; the comments in the row modules list
the wordings seen in torch, gloo and NCCL versions (their sources, and public issue threads,
repo#number) that the anchors were chosen for.
"""

from __future__ import annotations

from ddp_doctor.logscan.logfacts import FACT_ANCHORS, FACT_ONLY_ANCHORS
from ddp_doctor.logscan.pattern import Pattern
from ddp_doctor.logscan.patterns_cluster import CLUSTER_PATTERNS
from ddp_doctor.logscan.patterns_fabric import FABRIC_PATTERNS
from ddp_doctor.logscan.patterns_gpu import GPU_PATTERNS
from ddp_doctor.logscan.patterns_hints import HINT_PATTERNS
from ddp_doctor.logscan.patterns_hosts import HOST_PATTERNS
from ddp_doctor.logscan.patterns_jobs import JOB_PATTERNS
from ddp_doctor.logscan.patterns_launchers import LAUNCHER_PATTERNS
from ddp_doctor.logscan.patterns_network import NETWORK_PATTERNS
from ddp_doctor.logscan.patterns_platform import PLATFORM_PATTERNS
from ddp_doctor.logscan.patterns_ranks import RANK_PATTERNS, crash_role
from ddp_doctor.logscan.patterns_training import TRAINING_PATTERNS

PATTERNS: tuple[Pattern, ...] = (
    *GPU_PATTERNS,  # the driver's Xid lines: a GPU that failed under the job
    *CLUSTER_PATTERNS,  # transports, CUDA faults, a stuck watchdog: before the generic rows
    *HOST_PATTERNS,  # NCCL's words for known causes, memory killers, schedulers
    *FABRIC_PATTERNS,  # more NET/IB texts and scheduler stops
    *JOB_PATTERNS,  # NCCL's bootstrap on the job, Fabric Manager, scheduler stops
    *NETWORK_PATTERNS,
    *RANK_PATTERNS,
    *LAUNCHER_PATTERNS,
    *PLATFORM_PATTERNS,
    *TRAINING_PATTERNS,  # ends with the generic NCCL WARN row
)
HINTS: tuple[Pattern, ...] = HINT_PATTERNS

# torchrun's ChildFailedError summary (torchrun_block.py): its root cause, found by these
# lines, is the strongest DDP307 hit (priority 3) and names the rank that failed first. A
# summary retyped into an issue may have lost its capitals.
BLOCK_STARTS: tuple[str, ...] = (
    "ChildFailedError",
    "Cause (first observed",
    "cause (first observed",
)
ROOT_CAUSE_PATTERN = Pattern(
    "DDP307",
    "rank-crashed",
    BLOCK_STARTS,
    "rank {rank}[ (local rank {local_rank})][ on {host}] failed first (torchrun's root cause): "
    "exit code {exitcode}[ ({signal})]",
    role_of=crash_role,
    priority=3,
)
# nn.DataParallel's replica error: the lines after it hold the replica's own error.
REPLICA_PATTERN = next(p for p in TRAINING_PATTERNS if p.code == "DDP510")


def table_anchors() -> tuple[str, ...]:
    """Every anchor but the fact-only ones: a line with none of these needs no table."""
    rows = (*PATTERNS, *HINTS)
    anchors = tuple(anchor for pattern in rows for anchor in pattern.anchors)
    return anchors + BLOCK_STARTS + FACT_ANCHORS


def all_anchors() -> tuple[str, ...]:
    return table_anchors() + FACT_ONLY_ANCHORS
