"""DDP221: the ladder of layers between nodes (readings/ladder.py) stopped at a NCCL rung. The
rungs below (the store, gloo) have findings of their own when they fail (DDP211, DDP202,
DDP219 ...); this one names the layer where NCCL between nodes falls short."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.readings.ladder import GPU_RUNGS, first_failed, ladder
from ddp_doctor.registry import Hit, rule

FIXES = {
    "nccl-fabric": "Make NCCL use the fabric: check `ibv_devinfo` lists the HCAs as PORT_ACTIVE "
    "inside the container (devices /dev/infiniband and the rdma libraries mounted), unset "
    "NCCL_IB_DISABLE and NCCL_NET=Socket, and name the HCAs with NCCL_IB_HCA; on AWS install "
    "the aws-ofi-nccl plugin for EFA.",
    "gpudirect": "Load nvidia-peermem (or use dma-buf with a recent driver and NCCL), and "
    "check NCCL_NET_GDR_LEVEL is not set lower than the GPU-to-NIC distance.",
    "nvls": "Check that Fabric Manager and the IMEX/multicast support of the driver are up; "
    "NVLS needs CUDA multicast objects (driver 530+, NCCL 2.17+).",
}


@rule(
    "DDP221",
    Remediation(
        "Fix the layer named: the fabric (HCAs visible, NCCL_IB_DISABLE and NCCL_NET unset), "
        "GPUDirect RDMA (nvidia-peermem), or NVLS (Fabric Manager, multicast support)."
    ),
)
def inter_node_rung_failed(facts: FactSet) -> Iterator[Hit]:
    """What it finds: in a multi-node NCCL job whose first all-reduce worked, the first layer
    between nodes that NCCL's own INFO lines show missing: NCCL over sockets instead of
    InfiniBand, RoCE or EFA (with or without an IB device found), NET/IB channels without
    GPUDirect RDMA (no /GDRDMA), or NVLS multicast unavailable where the GPUs sit in an
    NVSwitch fabric. The ladder runs in order (store, gloo, NCCL over sockets, the fabric,
    GPUDirect, NVLS) and stops at the first rung that fails.
    Why it matters: the job runs, but across nodes at a fraction of the fabric's bandwidth
    (sockets: often 10x slower), so it looks healthy and trains slowly.
    Example: a container without /dev/infiniband: "NET/IB : No device found.", then
    "Using network Socket".
    Fix: the layer named in the finding.
    """
    if facts.cluster is None:
        return
    rungs = ladder(facts)
    failed = first_failed(rungs)
    if failed is None or failed.name not in GPU_RUNGS[1:]:
        return
    yield Hit(
        f"the ladder between nodes stopped at {failed.name}: {failed.why}",
        {"rung": failed.name, "why": failed.why, "rungs": {r.name: r.state for r in rungs}},
        fix=Remediation(FIXES[failed.name]),
    )
