"""The ladder of a multi-node run: the layers between nodes in the order they build on each
other, each passed, failed or not run, and the first that failed. The store over TCP (the
network preflight's connect to the master's port, torchrun's rendezvous), gloo across nodes
(`--isolate`'s pair groups, or the job's own gloo group), then on GPU nodes NCCL over sockets
(its bootstrap and a first collective), NCCL over the fabric (IB, RoCE or EFA, not sockets),
GPUDirect RDMA on that fabric, and NVLS where the GPUs sit in an NVSwitch fabric.

The GPU rungs are read from NCCL's own INFO lines in the job's output (the doctor sets
NCCL_DEBUG=INFO for its own job where NCCL runs between nodes, unless the user set NCCL_DEBUG;
where it did, the lines are kept apart in JobFacts.nccl_info, readings/nccl_debug.py):
"NET/IB : Using [0]mlx5_0:1/IB ...", "NET/IB : No device found.", "Using network Socket",
"... via NET/IB/0/GDRDMA", "NVLS multicast support is not available on dev 0". Without those
lines they are "not run", with why (the user's NCCL_DEBUG=WARN, a NCCL_DEBUG_FILE ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddp_doctor.facts.machine import FactSet
from ddp_doctor.readings.nccl_debug import lines_missing_why

PASSED, FAILED, NOT_RUN = "passed", "failed", "not run"
RUNGS = ("store", "gloo", "nccl-socket", "nccl-fabric", "gpudirect", "nvls")
GPU_RUNGS = RUNGS[2:]

_NCCL_INFO = re.compile(r"NCCL INFO (.*)")
_IB_USING = re.compile(r"NET/IB ?: Using ([^;]*)")
_DEVICE = re.compile(r"\[\d+\][^\s\[;]+")
_NETWORK = re.compile(r"Using network (\w+)")
_VIA = re.compile(r"via (NET/[A-Za-z]+)(?:/\d+(?:\(\d+\))?)?(/GDRDMA)?")  # NET/IB/2(3)/GDRDMA
_OFI = re.compile(r"NET/OFI Selected [Pp]rovider is (\w+)")


@dataclass(frozen=True)
class Rung:
    name: str
    state: str  # PASSED, FAILED, NOT_RUN
    why: str = ""


@dataclass(frozen=True)
class NcclNet:
    """What NCCL said about its network, from its INFO lines."""

    seen: bool = False  # any NCCL INFO line at all
    network: str | None = None  # "IB", "Socket", an OFI or plugin name
    ib_devices: tuple[str, ...] = ()  # "[0]mlx5_0:1/IB"
    no_ib_device: bool = False
    via: tuple[str, ...] = ()  # transports of channels between nodes: "NET/IB", "NET/Socket"
    gdr: bool | None = None  # a NET/IB channel with /GDRDMA (True), only without (False)
    nvls_unavailable: bool = False


def nccl_net(output: str) -> NcclNet:
    seen, network, devices, no_device, nvls = False, None, [], False, False
    via: dict[str, None] = {}
    gdr: bool | None = None
    for line in output.splitlines():
        info = _NCCL_INFO.search(line)
        if info is None:
            continue
        body, seen = info.group(1), True
        if using := _IB_USING.search(body):
            found = [d for d in _DEVICE.findall(using.group(1)) if d not in devices]
            devices += found[: 8 - len(devices)]
        no_device |= "NET/IB : No device found" in body or "NET/IB: No device found" in body
        nvls |= "NVLS multicast support is not available" in body
        if found := _NETWORK.search(body) or _OFI.search(body):
            network = found.group(1)
        if channel := _VIA.search(body):
            via[channel.group(1)] = None
            if channel.group(1) == "NET/IB":
                gdr = bool(channel.group(2)) or bool(gdr)
        if "GPU Direct RDMA Enabled" in body:
            gdr = True
    return NcclNet(seen, network, tuple(devices), no_device, tuple(via), gdr, nvls)


def ladder(facts: FactSet) -> tuple[Rung, ...]:
    """Every rung in order; those after the first failure are not run."""
    job = facts.job
    rungs = [_store(facts), _gloo(facts)]
    if job is not None and job.backend == "nccl":
        rungs += _nccl_rungs(facts, nccl_net("\n".join((*job.nccl_info, job.output_tail))))
    else:
        rungs += [Rung(name, NOT_RUN, "the job ran no NCCL") for name in GPU_RUNGS]
    return _stopped_at_first_failure(rungs)


def first_failed(rungs: tuple[Rung, ...]) -> Rung | None:
    return next((rung for rung in rungs if rung.state == FAILED), None)


def _stopped_at_first_failure(rungs: list[Rung]) -> tuple[Rung, ...]:
    failed = first_failed(tuple(rungs))
    if failed is None:
        return tuple(rungs)
    after = RUNGS.index(failed.name)
    return tuple(
        rung
        if RUNGS.index(rung.name) <= after
        else Rung(rung.name, NOT_RUN, f"{failed.name} failed")
        for rung in rungs
    )


def _store(facts: FactSet) -> Rung:
    network, job = facts.network, facts.job
    port = network.port if network else None
    if port is not None and port.outcome != "answered":
        where = f"{network.master_addr}:{network.master_port}" if network else "the master"
        return Rung("store", FAILED, f"{where} {port.outcome}")
    if job is None or not job.launched:
        return Rung("store", NOT_RUN, "no job was launched")
    if not any(rank.stages for rank in job.ranks):
        return Rung("store", FAILED, "no rank got through torchrun's rendezvous")
    return Rung("store", PASSED)


def _gloo(facts: FactSet) -> Rung:
    cluster, job = facts.cluster, facts.job
    isolation = cluster.isolation if cluster else None
    if isolation is not None and isolation.pairs:
        apart = [p.nodes for p in isolation.pairs if not p.connected]
        if apart:
            named = ", ".join(f"{a}-{b}" for a, b in apart)
            return Rung("gloo", FAILED, f"pairs of nodes that could not connect: {named}")
        return Rung("gloo", PASSED, f"{len(isolation.pairs)} pairs connected")
    if job is None or job.backend != "gloo":
        return Rung("gloo", NOT_RUN, "neither --isolate nor a gloo job ran")
    inits = [rank.stage("init") for rank in job.ranks]
    failed = [rank.rank for rank, init in zip(job.ranks, inits, strict=True) if not _ok(init)]
    if failed:
        return Rung("gloo", FAILED, f"ranks {_listed(failed)} did not form the group")
    return Rung("gloo", PASSED)


def _nccl_rungs(facts: FactSet, net: NcclNet) -> list[Rung]:
    job = facts.job
    assert job is not None
    collective = [rank.stage("allreduce") for rank in job.ranks]
    worked = bool(collective) and all(_ok(stage) for stage in collective)
    if not worked:
        failed = [r.rank for r, s in zip(job.ranks, collective, strict=True) if not _ok(s)]
        return [
            Rung("nccl-socket", FAILED, f"the first all-reduce failed on ranks {_listed(failed)}")
        ]
    rungs = [Rung("nccl-socket", PASSED)]
    if not net.seen:
        why = lines_missing_why(facts.env.variables, job.doctor_env, job.nccl_logging)
        return rungs + [Rung(name, NOT_RUN, why) for name in GPU_RUNGS[1:]]
    rungs.append(_fabric(net))
    rungs.append(_gpudirect(net))
    rungs.append(_nvls(facts, net))
    return rungs


def _fabric(net: NcclNet) -> Rung:
    between = set(net.via)
    if net.network == "Socket" or (between and between <= {"NET/Socket"}):
        if net.ib_devices:
            why = f"NCCL found {', '.join(net.ib_devices)} but runs over sockets"
        elif net.no_ib_device:
            why = "NCCL found no IB/RoCE device (NET/IB : No device found) and runs over sockets"
        else:
            why = "NCCL runs over sockets between nodes"
        return Rung("nccl-fabric", FAILED, why)
    if net.network or net.ib_devices or between:
        return Rung("nccl-fabric", PASSED, net.network or ", ".join(net.ib_devices))
    return Rung("nccl-fabric", NOT_RUN, "NCCL named no network (a single node?)")


def _gpudirect(net: NcclNet) -> Rung:
    if net.gdr is None:
        return Rung("gpudirect", NOT_RUN, "no NET/IB channel between nodes in NCCL's lines")
    if net.gdr:
        return Rung("gpudirect", PASSED, "NET/IB channels with GDRDMA")
    return Rung(
        "gpudirect", FAILED, "NET/IB channels without GDRDMA: data goes through host memory"
    )


def _nvls(facts: FactSet, net: NcclNet) -> Rung:
    topology = facts.topology
    in_fabric = bool(topology) and any(
        gpu.fabric is not None and gpu.fabric.state == "completed" for gpu in topology.gpus
    )
    if not in_fabric:
        return Rung("nvls", NOT_RUN, "the GPUs are in no NVSwitch fabric")
    if net.nvls_unavailable:
        return Rung(
            "nvls", FAILED, "NVLS multicast support is not available, in an NVSwitch fabric"
        )
    return Rung("nvls", PASSED)


def _ok(stage: object) -> bool:
    return stage is not None and bool(
        getattr(stage, "ended", False) and getattr(stage, "ok", False)
    )


def _listed(ranks: list[int], shown: int = 8) -> str:
    head = ", ".join(map(str, ranks[:shown]))
    return head + (f" and {len(ranks) - shown} more" if len(ranks) > shown else "")
