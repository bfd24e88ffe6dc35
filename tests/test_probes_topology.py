"""The topology probe and the PCIe load sampler against the fake pynvml (nvidia-ml-py's names,
enum values and quirks), and the fake's topology part against the real module."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import fake_topology
import fakes
import pytest
from fakes import FakeGpu, FakeNvLink, FakeNvml, FakePair

from ddp_doctor.engine import Probe, run_probe
from ddp_doctor.facts.job import JobFacts, Preflight, RankFacts, StageRecord
from ddp_doctor.facts.topology import PcieSample, normal_bus_id
from ddp_doctor.model import ProbeStatus
from ddp_doctor.probes.base import ProbeFailed, ProbeSkipped
from ddp_doctor.probes.job.pcie_load import PcieLoadSampler, ran_load_stage, with_load_samples
from ddp_doctor.probes.topology import collect_topology

BUSES = ("18", "2A", "3A", "5D")
SWITCHES = ("05",) * 5 + ("06",) * 4 + ("07",) * 4 + ("08",) * 5


def h100(index: int, **changes: object) -> FakeGpu:
    settings: dict[str, object] = {
        "bus_id": f"00000000:{BUSES[index]}:00.0",
        "pcie_idle": (1, 16),
        "pcie_loaded": (5, 16),
        "pcie_max": (5, 16),
        "gpu_max_gen": 5,
        "memory_nodes": (index // 2,),
        "cpus": tuple(range(56)) if index < 2 else tuple(range(56, 112)),
        "nvlinks": tuple(FakeNvLink(remote_bus_id=f"00000000:{s}:00.0") for s in SWITCHES),
        "fabric": ("completed", 0),
    }
    settings.update(changes)
    return FakeGpu(**settings)  # type: ignore[arg-type]


def four_h100(**nvml: object) -> FakeNvml:
    return FakeNvml(gpus=[h100(i) for i in range(4)], **nvml)  # type: ignore[arg-type]


def test_hgx_gpus_with_links_numa_and_fabric() -> None:
    facts = collect_topology(four_h100().module())
    first = facts.gpus[0]
    assert (first.index, first.pci_bus_id, first.compute_capability) == (
        0,
        "00000000:18:00.0",
        (9, 0),
    )
    pcie = first.pcie
    assert (pcie.current_gen, pcie.current_width, pcie.max_gen, pcie.max_width) == (1, 16, 5, 16)
    assert pcie.gpu_max_gen == 5
    assert first.pcie_under_load is None  # only the sampler reads the link under load
    assert first.numa_node == 0 and facts.gpus[3].numa_node == 1  # from the memory affinity
    assert first.cpu_affinity == "0-55" and facts.gpus[2].cpu_affinity == "56-111"
    assert len(first.nvlinks) == 18 and len(first.active_nvlinks) == 18
    assert {link.remote_type for link in first.nvlinks} == {"switch"}
    assert first.nvlinks[17].remote_bus_id == "00000000:08:00.0"
    assert first.nvlinks[0].version == 6  # NVML_NVLINK_VERSION_4_0
    assert first.fabric is not None and (first.fabric.state, first.fabric.status) == (
        "completed",
        0,
    )


def test_every_pair_has_ancestor_and_p2p_statuses() -> None:
    pairs = {(0, 1): FakePair("single"), (2, 3): FakePair("system", "chipset-not-supported")}
    facts = collect_topology(four_h100(pairs=pairs).module())
    assert [(p.a, p.b) for p in facts.pairs] == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert facts.pair(1, 0) is facts.pairs[0]
    assert facts.pair(0, 1).common_ancestor == "single"  # type: ignore[union-attr]
    blocked = facts.pair(2, 3)
    assert blocked is not None and blocked.common_ancestor == "system"
    assert (blocked.p2p_read, blocked.p2p_write) == ("chipset-not-supported", "ok")
    assert facts.pair(0, 2).p2p_nvlink == "not-supported"  # type: ignore[union-attr]


def test_p2p_read_index_is_unwrapped_from_nvidia_ml_pys_tuple() -> None:
    """NVML_P2P_CAPS_INDEX_READ is (0,) in nvidia-ml-py; passing it on fails in ctypes."""
    fake = four_h100()
    assert fake.module().NVML_P2P_CAPS_INDEX_READ == (0,)
    facts = collect_topology(fake.module())
    assert all(pair.p2p_read == "ok" for pair in facts.pairs)


@pytest.mark.parametrize("status", sorted(fake_topology.P2P_CODES))
def test_each_p2p_status_keeps_nvmls_name(status: str) -> None:
    fake = FakeNvml(gpus=[h100(0), h100(1)], default_pair=FakePair("single", status, status))
    (pair,) = collect_topology(fake.module()).pairs
    assert pair.p2p_read == status == pair.p2p_write


def test_pcie_gpu_without_nvlink_or_fabric() -> None:
    gpu = FakeGpu(name="NVIDIA GeForce RTX 4090", capability=(8, 9), mig_mode=None)
    facts = collect_topology(fakes.fake_nvml_module(gpu))
    assert facts.gpus[0].nvlinks == () and facts.gpus[0].fabric is None


def test_inactive_link_has_no_remote() -> None:
    links = (FakeNvLink(), FakeNvLink(active=False), FakeNvLink())
    facts = collect_topology(fakes.fake_nvml_module(h100(0, nvlinks=links)))
    states = [(link.link, link.active, link.remote_type) for link in facts.gpus[0].nvlinks]
    assert states == [(0, True, "switch"), (1, False, None), (2, True, "switch")]


def test_fabric_not_started_and_older_nvidia_ml_py() -> None:
    fake = FakeNvml(gpus=[h100(0, fabric=("not-started", 0))])
    fabric = collect_topology(fake.module()).gpus[0].fabric
    assert fabric is not None and fabric.state == "not-started"
    old = FakeNvml(gpus=[h100(0, fabric=("not-started", 0))], old_nvidia_ml_py=True)
    assert collect_topology(old.module()).gpus[0].fabric is None


def test_numa_node_from_nvml_when_it_answers() -> None:
    facts = collect_topology(fakes.fake_nvml_module(h100(0, numa_node=3, memory_nodes=None)))
    assert facts.gpus[0].numa_node == 3


def test_unsupported_queries_are_unknown_values() -> None:
    gpu = h100(0, pcie_idle=None, pcie_max=None, gpu_max_gen=None, cpus=None, memory_nodes=None)
    facts = collect_topology(fakes.fake_nvml_module(gpu))
    assert facts.gpus[0].pcie.max_gen is None and facts.gpus[0].cpu_affinity is None
    assert facts.gpus[0].numa_node is None


def test_cpu_numbers_past_64_are_read() -> None:
    gpu = h100(0, cpus=(*range(56, 112), *range(168, 224)))
    facts = collect_topology(fakes.fake_nvml_module(gpu))
    assert facts.gpus[0].cpu_affinity == "56-111,168-223"


def test_iommu_groups_from_sysfs(tmp_path: Path) -> None:
    groups = {"0000:18:00.0": (41, "DMA-FQ"), "0000:2a:00.0": (42, "identity")}
    sysfs = fake_topology.fake_sysfs(tmp_path, groups)
    facts = collect_topology(four_h100().module(), sysfs=sysfs)
    found = [(g.iommu_group, g.iommu_type) for g in facts.gpus]
    assert found == [(41, "DMA-FQ"), (42, "identity"), (None, None), (None, None)]
    without = collect_topology(four_h100().module(), sysfs=tmp_path / "no-such-sys")
    assert {g.iommu_group for g in without.gpus} == {None}


def test_no_driver_is_skipped_and_a_lost_gpu_fails() -> None:
    with pytest.raises(ProbeSkipped):
        collect_topology(fakes.fake_nvml_module(init_error=fakes.NVML_ERROR_LIBRARY_NOT_FOUND))
    fake = four_h100(errors={"nvmlDeviceGetPciInfo": fakes.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(ProbeFailed):
        collect_topology(fake.module())
    assert fake.calls[-1] == "nvmlShutdown"
    result = run_probe(Probe("topology", lambda: collect_topology(fake.module()), 5.0))
    assert result.status is ProbeStatus.FAILED and result.error


# --- the PCIe links under load ------------------------------------------------------------------


def test_sampler_keeps_the_fastest_state_seen() -> None:
    fake = four_h100()
    with PcieLoadSampler(fake.module()) as sampler:
        sampler.sample()  # still idle at the first reading
        fake.under_load = True
        sampler.sample()
    assert fake.calls[-1] == "nvmlShutdown"
    sample = sampler.best[str(normal_bus_id("00000000:18:00.0"))]
    assert sample == PcieSample(gen=5, width=16, samples=2)
    topology = with_load_samples(collect_topology(fake.module()), sampler.best, sampler.note())
    assert all(gpu.pcie_under_load == sample for gpu in topology.gpus)
    assert topology.under_load.startswith("sampled 2 times")


def test_sampler_reads_only_while_rank_0_is_in_the_bandwidth_stage() -> None:
    fake = four_h100(under_load=True)
    with PcieLoadSampler(fake.module()) as sampler:
        sampler.on_stage("ddp")
        assert sampler.best == {}
        sampler.on_stage("bandwidth")
        deadline = time.monotonic() + 10
        while not sampler.best and time.monotonic() < deadline:
            time.sleep(0.01)
        sampler.on_stage(None)  # the stage ended
        counts = {s.samples for s in sampler.best.values()}
        time.sleep(0.05)
        assert {s.samples for s in sampler.best.values()} == counts  # no reading after it
    assert counts and min(counts) >= 1
    assert fake.calls[-1] == "nvmlShutdown"


def test_sampler_notes_why_it_has_nothing() -> None:
    with PcieLoadSampler(four_h100().module()) as sampler:
        sampler.on_stage("ddp")
    assert sampler.note() == "not sampled: the job did not reach the bandwidth stage"
    assert "between two polls" in sampler.note(job_ran_load_stage=True)  # a stage under 50 ms
    failing = fakes.fake_nvml_module(init_error=fakes.NVML_ERROR_NO_PERMISSION)
    with PcieLoadSampler(failing) as sampler:
        sampler.on_stage("bandwidth")
    assert sampler.best == {} and sampler.note().startswith("not sampled: NVML could not start")
    lost = four_h100(errors={"nvmlDeviceGetCurrPcieLinkWidth": fakes.NVML_ERROR_GPU_IS_LOST})
    with PcieLoadSampler(lost.module()) as sampler:
        sampler.on_stage("bandwidth")
    assert sampler.note().startswith("not sampled: NVML stopped answering")


def test_a_finished_job_tells_whether_its_ranks_ran_the_bandwidth_stage() -> None:
    ran = RankFacts(rank=0, stages=(StageRecord("init", True, True), StageRecord("bandwidth")))
    stopped = RankFacts(rank=1, stages=(StageRecord("init", True, False),))
    preflight = Preflight("127.0.0.1")
    assert ran_load_stage(JobFacts(launched=True, preflight=preflight, ranks=(stopped, ran)))
    assert not ran_load_stage(JobFacts(launched=True, preflight=preflight, ranks=(stopped,)))
    assert not ran_load_stage(None)


# --- the fake against the real module ----------------------------------------------------------


def test_fake_fabric_structures_match_nvidia_ml_py() -> None:
    real = pytest.importorskip("pynvml")
    for name in ("c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfoV_t"):
        real_fields = {field[0] for field in getattr(real, name)._fields_}
        fake_fields = {field[0] for field in getattr(fake_topology, name)._fields_}
        assert fake_fields <= real_fields, name
        assert {"state", "status"} <= fake_fields


TOPOLOGY_QUERIES = (
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMemoryAffinity",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
)


@pytest.mark.parametrize("name", TOPOLOGY_QUERIES)
def test_fake_topology_queries_take_nvmls_arguments(name: str) -> None:
    real = pytest.importorskip("pynvml")
    fake = FakeNvml()
    expected = len(inspect.signature(getattr(real, name)).parameters)
    assert len(inspect.signature(getattr(fake, name)).parameters) == expected
