"""DDP303, DDP324: bus bandwidth against what the topology should reach, and the variables
that switch NCCL's fast paths off."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.job import BandwidthRow
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation, Severity
from ddp_doctor.readings.expected_busbw import Expectation, expectations
from ddp_doctor.readings.topology_issues import (
    blocked_p2p,
    degraded_links,
    fabric_not_ready,
    far_ranks,
    nvlinks_down,
    transport_switches,
)
from ddp_doctor.registry import Hit, rule

PCIE_PATHS = ("pcie-p2p", "host-memory")


@rule(
    "DDP303",
    Remediation(
        "Start with the likely cause named in the message. Then compare `nvidia-smi topo -m` "
        "with what the machine should have, and run once with NCCL_DEBUG=INFO: its "
        "'via P2P/...', 'via SHM' and 'NET/...' lines show the transport each pair of GPUs "
        "really uses.",
        ("nvidia-smi topo -m", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH ddp-doctor run"),
    ),
)
def low_bus_bandwidth(facts: FactSet) -> Iterator[Hit]:
    """What it finds: busbw (nccl-tests' formulas, GB = 1e9 bytes) of the largest size in a
    collective's sweep under the expected band for this topology: half of the expected figure
    below 1 GiB, 70% from 1 GiB (a quarter and 35% where the ring goes through host memory).
    The expected figure is the ring's slowest link at NCCL's link rates, or NVLink SHARP's
    published all-reduce figure on 8 NVSwitch GPUs; sizes under 64 MiB are latency-bound and
    never judged. --min-busbw replaces the band with an absolute floor for every collective.
    Why it matters: training runs, but gradient sync dominates the step time.
    Example: 8 H100s reaching 20 GB/s all-reduce because NCCL_P2P_DISABLE=1 was left set.
    Fix: the cause the message names (transport variables, NVLink, PCIe link, P2P, CPU
    binding); NCCL_DEBUG=INFO shows which transport each pair uses.
    """
    job, floor = facts.job, facts.plan.min_busbw_gbps
    if not job or job.nproc < 2 or not job.bandwidth:
        return  # one rank moves no data between ranks: its busbw is 0 by definition
    by_op: dict[str, list[BandwidthRow]] = {}
    for row in job.bandwidth:
        by_op.setdefault(row.op, []).append(row)
    if floor is not None:
        for op, rows in by_op.items():
            largest = max(rows, key=lambda row: row.size_bytes)
            if largest.busbw_gbps < floor:
                yield Hit(
                    f"{op} busbw {largest.busbw_gbps:.2f} GB/s at {largest.size_bytes} B is "
                    f"below --min-busbw {floor:g} GB/s",
                    {
                        "op": op,
                        "busbw_gbps": largest.busbw_gbps,
                        "size_bytes": largest.size_bytes,
                        "min_busbw_gbps": floor,
                    },
                )
        return
    for op, expectation in expectations(facts).items():
        if op in by_op:
            yield from _under_band(facts, expectation, max(by_op[op], key=lambda r: r.size_bytes))


def _under_band(facts: FactSet, expectation: Expectation, largest: BandwidthRow) -> Iterator[Hit]:
    floor = expectation.floor_gbps(largest.size_bytes)
    if floor is None or expectation.gbps is None or largest.busbw_gbps >= floor:
        return
    causes = likely_causes(facts, expectation)
    percent = expectation.percent(largest.size_bytes, largest.busbw_gbps)
    yield Hit(
        f"{expectation.op} busbw {largest.busbw_gbps:.1f} GB/s at {largest.size_bytes} B is "
        f"{percent:g}% of the {expectation.gbps:g} GB/s this topology should reach "
        f"({expectation.basis}); likely cause: {'; '.join(causes)}",
        {
            "op": expectation.op,
            "busbw_gbps": largest.busbw_gbps,
            "size_bytes": largest.size_bytes,
            "expected_gbps": expectation.gbps,
            "floor_gbps": floor,
            "percent_of_expected": percent,
            "causes": causes,
        },
    )


def likely_causes(facts: FactSet, expectation: Expectation) -> list[str]:
    """What the facts show that slows this path, most decisive first."""
    causes = [
        f"{s.variable}={s.value} is set ({s.effect}; DDP324)"
        for s in transport_switches(facts.env)
        if not s.between_nodes_only
    ]
    causes += [
        f"GPU {g.index} has not joined the NVSwitch fabric (DDP325)"
        for g in fabric_not_ready(facts)
    ]
    causes += [
        f"GPU {d.gpu.index} has {d.active} of {d.usual} NVLinks active (DDP321)"
        for d in nvlinks_down(facts)
    ]
    if expectation.path in PCIE_PATHS:
        causes += [
            f"GPU {d.gpu.index}'s PCIe link ran at gen{d.under_load.gen} x{d.under_load.width} "
            f"under load, not gen{d.gpu.pcie.max_gen} x{d.gpu.pcie.max_width} (DDP320)"
            for d in degraded_links(facts)
        ]
        blocked = [f"{b.pair.a}-{b.pair.b}" for b in blocked_p2p(facts)]
        if blocked:
            causes.append(
                f"no direct P2P between GPUs {', '.join(blocked)} under one switch (DDP322)"
            )
    far = [str(f.identity.rank) for f in far_ranks(facts)]
    if far:
        causes.append(f"ranks {', '.join(far)} run on CPUs far from their GPUs (DDP323)")
    return causes or [
        "nothing in the topology or environment explains it; NCCL_DEBUG=INFO shows the "
        "transport each pair of GPUs uses, and other jobs on these GPUs would share them"
    ]


@rule(
    "DDP324",
    Remediation(
        "Unset the variable unless it works around a problem you still have (then note why); "
        "check the shell profile, the container image's ENV, the job script and /etc/nccl.conf "
        "or ~/.nccl.conf, where NCCL reads the same settings.",
        ("env | grep ^NCCL_", "cat /etc/nccl.conf ~/.nccl.conf 2>/dev/null"),
    ),
)
def transport_disabled_by_env(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NCCL_P2P_DISABLE or NCCL_SHM_DISABLE set to a non-zero number,
    NCCL_P2P_LEVEL=LOC, NCCL_NVLS_ENABLE=0, any NCCL_ALGO or NCCL_PROTO, and, reported as
    information on one node, NCCL_IB_DISABLE set or NCCL_NET=Socket.
    Why it matters: these are workarounds copied from issue threads that outlive the problem;
    each turns a fast path off for every job that inherits the environment: P2P off sends
    NVLink traffic through host memory (20x slower on an HGX H100), NCCL_ALGO=Ring gives up
    NVLink SHARP, IB off sends traffic between nodes over TCP.
    Example: `export NCCL_P2P_DISABLE=1` left in ~/.bashrc after debugging a hang.
    Fix: unset it, or keep it deliberately with a note of the problem it works around.
    """
    single_node = _single_node(facts)
    for switch in transport_switches(facts.env):
        quiet = switch.between_nodes_only and single_node
        yield Hit(
            f"{switch.variable}={switch.value}: {switch.effect}"
            + (" (no effect on this single-node run)" if quiet else ""),
            {"variable": switch.variable, "value": switch.value},
            severity=Severity.INFO if quiet else None,
        )


def _single_node(facts: FactSet) -> bool:
    job = facts.job
    return job is None or len({identity.host for identity in job.identities}) <= 1
