"""The node plan: torchrun's flags, else torchrun's own variables (Kubeflow), else SLURM; and
SLURM's compressed host lists, expanded as `scontrol show hostnames` does."""

from __future__ import annotations

import pytest

from ddp_doctor.probes import scheduler
from ddp_doctor.probes.runner import CommandResult
from ddp_doctor.readings.hostlist import HostListError, expand_hostlist
from ddp_doctor.run.nodeplan import LaunchFlags, PlanError, parse_endpoint, plan_nodes, slurm_port


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[01-04,07],cpu9", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu9"]),
        ("node[8-10]", ["node8", "node9", "node10"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a,b, c", ["a", "b", "c"]),
        ("login1", ["login1"]),
        ("gpu[3]-ib", ["gpu3-ib"]),
    ],
)
def test_host_lists_expand_as_slurm_does(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text", ["gpu[1-", "gpu1]", "gpu[3-1]", "gpu[a-b]", "g[[1]]", "n[1-9999999]"]
)
def test_malformed_host_lists_are_refused(text: str) -> None:
    with pytest.raises(HostListError):
        expand_hostlist(text)


def test_scontrol_expands_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler.shutil, "which", lambda name: "/usr/bin/scontrol")

    def runner(argv: list[str], timeout_s: float) -> CommandResult:
        assert argv[1:] == ["show", "hostnames", "gpu[1-2]"]
        return CommandResult(tuple(argv), 0, "gpu1\ngpu2\n", "", 0.01)

    assert scheduler.expand_nodelist("gpu[1-2]", runner) == (
        ["gpu1", "gpu2"],
        "scontrol show hostnames",
    )


def test_own_parser_when_scontrol_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler.shutil, "which", lambda name: "/usr/bin/scontrol")

    def runner(argv: list[str], timeout_s: float) -> CommandResult:
        return CommandResult(tuple(argv), None, "", "", timeout_s)  # timed out

    assert scheduler.expand_nodelist("gpu[1-2]", runner)[1] == "expanded by ddp-doctor"


# --- plans ------------------------------------------------------------------------------------
def test_one_node_is_no_plan() -> None:
    assert plan_nodes(LaunchFlags(), {}) is None
    assert plan_nodes(LaunchFlags(nnodes="1"), {}) is None
    assert plan_nodes(LaunchFlags(), {"PET_NNODES": "1", "MASTER_ADDR": "x"}) is None
    assert plan_nodes(LaunchFlags(), {"SLURM_JOB_ID": "7", "SLURM_NNODES": "1"}) is None


def test_static_flags() -> None:
    flags = LaunchFlags("2", 1, "10.0.0.1", 29500)
    plan = plan_nodes(flags, {})
    assert plan is not None
    assert (plan.rendezvous, plan.nnodes, plan.node_rank) == ("static", 2, 1)
    assert (plan.master_addr, plan.master_port, plan.scheduler) == ("10.0.0.1", 29500, None)
    assert plan.sources["node_rank"] == "--node-rank"
    assert plan.hosts_master is False


def test_c10d_flags_with_a_range_of_nodes() -> None:
    plan = plan_nodes(LaunchFlags("1:4", rdzv_endpoint="head:29400", rdzv_id="exp1"), {})
    assert plan is not None
    assert (plan.rendezvous, plan.min_nodes, plan.nnodes) == ("c10d", 1, 4)
    assert (plan.master_addr, plan.master_port, plan.rdzv_id) == ("head", 29400, "exp1")
    assert plan.node_rank is None and plan.hosts_master is None


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [
        ("head", ("head", 29400)),
        ("head:1234", ("head", 1234)),
        ("[fd00::1]:29401", ("fd00::1", 29401)),
    ],
)
def test_endpoints(endpoint: str, parsed: tuple[str, int]) -> None:
    assert parse_endpoint(endpoint, "--rdzv-endpoint") == parsed


@pytest.mark.parametrize(
    "flags",
    [
        LaunchFlags("2", None, "h", 1),  # no node rank
        LaunchFlags("2", 0, None, 1),  # no master
        LaunchFlags("2", 0, "h", None),  # no port
        LaunchFlags("2", 2, "h", 1),  # rank beyond the nodes
        LaunchFlags("1:2", 0, "h", 1),  # a range needs c10d
        LaunchFlags("0", 0, "h", 1),
        LaunchFlags("two", 0, "h", 1),
        LaunchFlags(None, 1),  # --node-rank alone
        LaunchFlags(None, rdzv_endpoint="h:1"),
        LaunchFlags("2", 0, "h", rdzv_endpoint="h:1"),  # static and c10d at once
        LaunchFlags("2", rdzv_endpoint="h:99999"),
    ],
)
def test_incomplete_or_contradictory_flags_are_usage_errors(flags: LaunchFlags) -> None:
    with pytest.raises(PlanError):
        plan_nodes(flags, {})


def test_kubeflow_pytorchjob_variables() -> None:
    env = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "PET_NNODES": "3",
        "PET_NODE_RANK": "2",
        "MASTER_ADDR": "job-master-0",
        "MASTER_PORT": "23456",
    }
    plan = plan_nodes(LaunchFlags(), env)
    assert plan is not None
    assert (plan.nnodes, plan.node_rank, plan.master_addr, plan.master_port) == (
        3,
        2,
        "job-master-0",
        23456,
    )
    assert plan.scheduler == "kubernetes"
    assert plan.sources == {
        "nnodes": "PET_NNODES",
        "node_rank": "PET_NODE_RANK",
        "master_addr": "MASTER_ADDR",
        "master_port": "MASTER_PORT",
    }


def test_elastic_pytorchjob_is_c10d() -> None:
    env = {
        "PET_NNODES": "2:4",
        "PET_RDZV_ENDPOINT": "job-worker-0:23456",
        "PET_RDZV_BACKEND": "c10d",
    }
    plan = plan_nodes(LaunchFlags(), env)
    assert plan is not None and plan.rendezvous == "c10d" and plan.min_nodes == 2
    with pytest.raises(PlanError):
        plan_nodes(LaunchFlags(), {**env, "PET_RDZV_BACKEND": "etcd"})


def slurm(node: int, **extra: str) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "123456",
        "SLURM_NNODES": "3",
        "SLURM_NODEID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_JOB_NODELIST": "gpu[07-08],cpu1",
        **extra,
    }


def test_slurm_allocation() -> None:
    plan = plan_nodes(LaunchFlags(), slurm(2))
    assert plan is not None
    assert (plan.nnodes, plan.node_rank, plan.scheduler) == (3, 2, "slurm")
    assert plan.hosts == ("gpu07", "gpu08", "cpu1") and plan.master_addr == "gpu07"
    assert plan.master_port == slurm_port("123456") == 20000 + 123456 % 10000
    assert plan.sources["master_addr"] == "first host of SLURM_JOB_NODELIST"
    assert plan.rdzv_id == "ddp-doctor-123456"
    assert plan.host_of(1) == "gpu08"


def test_slurm_step_values_and_flags_come_first() -> None:
    env = slurm(0, SLURM_STEP_NUM_NODES="2", SLURM_STEP_NODELIST="gpu[07-08]", MASTER_PORT="29999")
    plan = plan_nodes(LaunchFlags(master_addr="10.1.1.7"), env)
    assert plan is not None
    assert plan.nnodes == 2 and plan.hosts == ("gpu07", "gpu08")
    assert (plan.master_addr, plan.master_port) == ("10.1.1.7", 29999)
    assert plan.sources["master_port"] == "MASTER_PORT"


def test_a_second_task_on_a_slurm_node_is_refused() -> None:
    with pytest.raises(PlanError, match="ntasks-per-node=1"):
        plan_nodes(LaunchFlags(), slurm(0, SLURM_LOCALID="1"))


def test_a_malformed_slurm_node_list_is_a_usage_error() -> None:
    with pytest.raises(PlanError):
        plan_nodes(LaunchFlags(), slurm(0, SLURM_JOB_NODELIST="gpu[07-"))
