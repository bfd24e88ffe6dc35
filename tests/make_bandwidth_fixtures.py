"""Builds fixtures/bandwidth/*.json: one GPU machine per file, each with the verdict
`ddp-doctor diagnose` must give (tests/test_bandwidth_fixtures.py replays them).

No such machine was at hand, so the facts are built, not recorded: the NVML and topology
facts come from the real probes (collect_nvml, collect_topology and the PCIe load sampler)
run against tests/fakes.py's pynvml, set up with NVML's real names and enum values and the
bus ids, link counts and CPU lists of each layout; the job's busbw rows follow the published
nccl-tests results that each description cites. The expected codes and figures are written
here by hand, and the script refuses to write a fixture the rules judge otherwise.

Run by hand: `python tests/make_bandwidth_fixtures.py [NAME ...]`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from bandwidth_machines import MACHINES, Machine
from fake_topology import fake_sysfs
from fakes import MIB, FakeNvml, FakePair

from ddp_doctor.facts.job import (
    BandwidthRow,
    Identity,
    JobFacts,
    PeerAccess,
    Preflight,
    RankFacts,
    StageRecord,
)
from ddp_doctor.facts.machine import (
    EnvFacts,
    FactSet,
    HostFacts,
    PlanFacts,
    TorchDevice,
    TorchFacts,
)
from ddp_doctor.judge import judge
from ddp_doctor.model import ProbeResult, ProbeStatus, make_report
from ddp_doctor.patient.bandwidth import bus_factor
from ddp_doctor.probes.job.pcie_load import PcieLoadSampler, with_load_samples
from ddp_doctor.probes.nvml import collect_nvml
from ddp_doctor.probes.topology import collect_topology
from ddp_doctor.readings.expected_busbw import bandwidth_tables
from ddp_doctor.report_io import report_to_json

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "bandwidth"
SIZES = [4**k * MIB for k in range(5)]  # the GPU default sweep, 1M:256M:4
STAGES = ("init", "identity", "allreduce", "ddp", "bandwidth", "memory")


def nvml_results(machine: Machine) -> list[ProbeResult]:
    fake = FakeNvml(gpus=machine.gpus, pairs=machine.pairs)
    nvml = collect_nvml(fake.module())
    with tempfile.TemporaryDirectory() as sysfs:
        topology = collect_topology(fake.module(), fake_sysfs(Path(sysfs), machine.iommu_groups))
    if machine.jobs:
        fake.under_load = True
        with PcieLoadSampler(fake.module()) as sampler:
            for _ in range(3):  # three readings while the sweep ran
                sampler.sample()
        topology = with_load_samples(topology, sampler.best, sampler.note())
    else:
        topology = with_load_samples(topology, {}, "not sampled: no job ran (--no-jobs)")
    return [
        ProbeResult("nvml", ProbeStatus.OK, nvml, 0.41),
        ProbeResult("topology", ProbeStatus.OK, topology, 0.12),
    ]


def torch_facts(machine: Machine) -> TorchFacts:
    devices = tuple(
        TorchDevice(i, g.name, g.capability or (0, 0), g.memory_total)
        for i, g in enumerate(machine.gpus)
    )
    return TorchFacts(
        importable=True,
        version="2.5.1+cu124",
        cuda_version="12.4",
        cudnn_version=90100,
        arch_list=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
        cuda_available=machine.torch_error is None,
        device_count=0 if machine.torch_error else len(devices),
        devices=() if machine.torch_error else devices,
        distributed_available=True,
        nccl_available=True,
        gloo_available=True,
        nccl_version="2.21.5",
        cuda_error=machine.torch_error,
    )


def job_facts(machine: Machine) -> JobFacts:
    n, buses = len(machine.gpus), [str(g.bus_id) for g in machine.gpus]
    everyone = f"0-{machine.cpu_count - 1}"
    identities = tuple(
        Identity(
            rank=r,
            world_size=n,
            local_rank=r,
            host="gpu-node-017",
            pid=48210 + r,
            device=f"cuda:{r}",
            pci_bus_id=buses[r],
            torch_version="2.5.1+cu124",
            cuda_version="12.4",
            nccl_version="2.21.5",
            driver_version="550.54.15",
            cpu_affinity=machine.rank_cpus[r] if machine.rank_cpus else everyone,
        )
        for r in range(n)
    )
    ok = tuple(StageRecord(s, ended=True, ok=True, seconds=0.5) for s in STAGES)
    return JobFacts(
        launched=True,
        preflight=Preflight("127.0.0.1", master_address="127.0.0.1", master_port=29500),
        backend="nccl",
        nproc=n,
        init_timeout_s=30.0,
        timeout_s=110.0,
        duration_s=14.2,
        exit_code=0,
        ranks=tuple(RankFacts(r, ok, None) for r in range(n)),
        identities=identities,
        bandwidth=tuple(row for op, values in machine.busbw.items() for row in rows(op, n, values)),
        peer_access=tuple(
            PeerAccess(buses[a], buses[b], _p2p_ok(machine, a, b))
            for a in range(n)
            for b in range(n)
            if a != b
        ),
    )


def rows(op: str, n: int, busbw: list[float]) -> list[BandwidthRow]:
    result = []
    for size, bus in zip(SIZES, busbw, strict=True):
        algbw = bus / bus_factor(n, op)
        count = size // 4 if op in ("all_reduce", "broadcast") else size // 4 // n * n
        seconds = count * 4 / (algbw * 1e9)
        result.append(
            BandwidthRow(
                count * 4, count, "float", round(seconds * 1e6, 2), round(algbw, 4), bus, op
            )
        )
    return result


def _p2p_ok(machine: Machine, a: int, b: int) -> bool:
    pair = machine.pairs.get((min(a, b), max(a, b)), FakePair())
    return pair.read == "ok" and pair.write == "ok"


def build(machine: Machine) -> dict:
    plan = PlanFacts(ops=tuple(machine.busbw), jobs=machine.jobs, timeout_s=120.0)
    host = HostFacts(
        system="Linux",
        release="5.15.0-105-generic",
        python_version="3.11.9",
        hostname="gpu-node-017",
        hostname_address="10.12.0.17",
        cpu_model=machine.cpu_model,
        cpu_count=machine.cpu_count,
        memory_total_bytes=1024**4,
        shm_total_bytes=512 * 1024**3,
        interfaces=("bond0", "eth0", "lo"),
    )
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "OMP_NUM_THREADS": "8", **machine.env}
    results = [
        ProbeResult("plan", ProbeStatus.OK, plan, 0.0),
        ProbeResult("env", ProbeStatus.OK, EnvFacts(env), 0.0),
        ProbeResult("host", ProbeStatus.OK, host, 0.01),
        *nvml_results(machine),
        ProbeResult("torch", ProbeStatus.OK, torch_facts(machine), 1.3),
    ]
    if machine.jobs:
        results.append(ProbeResult("job", ProbeStatus.OK, job_facts(machine), 14.2))
    report = make_report(results, judge(results))
    document = report_to_json(dataclasses.replace(report, created="2026-12-01T10:00:00+00:00"))
    return {
        "description": machine.description,
        "expect": machine.expect,
        "verdict": machine.verdict,
        **document,
    }


def check(name: str, machine: Machine, document: dict) -> None:
    """The rules must give the verdict written by hand, or the fixture is not written."""
    codes = sorted({f["code"] for f in document["findings"]})
    assert codes == sorted(set(machine.expect)), f"{name}: {codes} != {machine.expect}"
    from ddp_doctor.report_io import report_from_json

    tables = bandwidth_tables(FactSet.of(report_from_json(document).probes))
    got = {t["op"]: t["expected_gbps"] for t in tables}
    assert got == machine.verdict, f"{name}: expected busbw {got} != {machine.verdict}"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or list(MACHINES):
        machine = MACHINES[name]
        document = build(machine)
        check(name, machine, document)
        (OUT / f"{name}.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(name, sorted({f["code"] for f in document["findings"]}))


if __name__ == "__main__":
    main()
