"""Facts per rank and node read from a log, judged by the live rules' own functions (issue 21).

Each test of a shared code spies on the registered check function, as the DDP204 test of
test_logfacts.py does: the finding must come from that function, called on the log's facts.
Line formats are those of the sources named beside each text.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

from log_scans import codes

from ddp_doctor import registry
from ddp_doctor.logscan import LogScanner, scan_text
from ddp_doctor.logscan.factrules import SHARED_CODES, shared_rule
from ddp_doctor.rules import cluster, collectives, preflight, rendezvous


@contextmanager
def spying(code: str):
    """Calls of the registered check of `code`, observed (the function itself still runs)."""
    spec = registry.spec_for(code)
    calls: list = []

    def spy(facts):
        calls.append(facts)
        return spec.check(facts)

    # only this code's entry is swapped back: rule modules loaded meanwhile stay registered
    registry.RULES[code] = dataclasses.replace(spec, check=spy)
    try:
        yield calls
    finally:
        registry.RULES[code] = spec


def facts_of(text: str):
    scanner = LogScanner()
    scanner.feed(text.encode())
    scanner.findings()
    return scanner.log_facts


def test_the_per_rank_rules_are_the_live_check_functions() -> None:
    assert set(SHARED_CODES) >= {"DDP207", "DDP214", "DDP306", "DDP307", "DDP309"}
    assert shared_rule("DDP207") is rendezvous.world_size_mismatch
    assert shared_rule("DDP214") is preflight.master_addr_loopback
    assert shared_rule("DDP306") is collectives.version_skew
    assert shared_rule("DDP307") is collectives.rank_crashed
    assert shared_rule("DDP309") is cluster.env_differs_between_nodes


# --- DDP306: versions per rank -----------------------------------------------------------------
# torch >= 2.2 prefixes each rank's output with [rankN]:, NCCL_DEBUG=INFO prints its version
# line per process (format: NVIDIA/nccl#1381's log; a node left on an older image, as in
# NVIDIA/nccl#1267, where one node loaded nvidia-nccl-cu12 2.20.5 and the others 2.19.3).
PER_RANK_NCCL = (
    "[rank0]:gpu-1:4533:4533 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
    "[rank8]:gpu-2:2211:2211 [0] NCCL INFO NCCL version 2.20.5+cuda12.4\n"
    "[rank0]:gpu-1:4533:4667 [0] NCCL INFO Using network Socket\n"
)


def test_nccl_versions_per_rank_prefix_are_judged_by_version_skew() -> None:
    with spying("DDP306") as calls:
        findings = scan_text(PER_RANK_NCCL)
    assert findings[0].code == "DDP306"
    identities = calls[0].job.identities
    assert {i.rank: i.nccl_version for i in identities} == {0: "2.19.3", 8: "2.20.5"}
    assert findings[0].evidence["per_rank"] == {"0": "2.19.3", "8": "2.20.5"}
    assert findings[0].evidence["per_host"] == {"gpu-1": "2.19.3", "gpu-2": "2.20.5"}
    assert findings[0].evidence["from_log_facts"]["versions"]["rank 8"]["nccl"] == "2.20.5"


def test_torch_versions_printed_per_srun_task_are_judged_by_version_skew() -> None:
    text = (  # srun --label prefixes; collect_env's line on each node
        "0: PyTorch version: 2.3.1+cu121\n1: PyTorch version: 2.4.0+cu121\n"
    )
    with spying("DDP306") as calls:
        findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP306"]
    assert {i.host: i.torch_version for i in calls[0].job.identities} == {
        "task 0": "2.3.1+cu121",
        "task 1": "2.4.0+cu121",
    }


def test_one_unlabelled_torch_version_is_no_rank_fact() -> None:
    facts = facts_of("PyTorch version: 2.3.1+cu121\nPyTorch version: 2.4.0+cu121\n")
    assert facts.run.versions == {}
    assert "DDP306" not in codes("PyTorch version: 2.3.1\nPyTorch version: 2.4.0\n")


def test_the_same_versions_on_every_rank_are_silent() -> None:
    text = PER_RANK_NCCL.replace("2.20.5+cuda12.4", "2.19.3+cuda12.3")
    assert codes(text) == []


# --- DDP207: world sizes -------------------------------------------------------------------------
def rendezvous_result(group_rank: int, world: int) -> str:
    """torchrun's agent after its rendezvous (format: aws-samples awsome-distributed-training)."""
    return (
        "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for "
        "workers. Result:\n"
        "  restart_count=0\n  master_addr=node-0\n  master_port=29500\n"
        f"  group_rank={group_rank}\n  group_world_size=2\n"
        "  local_ranks=[0, 1]\n  role_ranks=[0, 1]\n  global_ranks=[0, 1]\n"
        f"  role_world_sizes=[{world}, {world}]\n  global_world_sizes=[{world}, {world}]\n\n"
    )


def test_nodes_that_report_different_world_sizes_are_judged_by_world_size_mismatch() -> None:
    with spying("DDP207") as calls:
        findings = scan_text(rendezvous_result(0, 4) + rendezvous_result(1, 8))
    assert [f.code for f in findings] == ["DDP207"]
    assert sorted(i.world_size for i in calls[0].job.identities) == [4, 8]
    assert findings[0].evidence["world_sizes"] == [4, 8]


def test_ranks_that_print_different_world_sizes_are_ddp207() -> None:
    text = (  # each rank's environment dump, read for the master it names
        "[rank0]: MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=8 RANK=0\n"
        "[rank5]: MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 WORLD_SIZE=4 RANK=5\n"
    )
    assert codes(text) == ["DDP207"]


def test_one_world_size_everywhere_is_silent() -> None:
    assert codes(rendezvous_result(0, 8) + rendezvous_result(1, 8)) == []


# --- DDP214: a loopback master address on a node other than node 0 -------------------------
# A two-node launch whose second node was given localhost (the pattern of pytorch/pytorch
# #124380's commands; the client line is c10d's socket.cpp warning of torch 2.x).
NODE1_LOCALHOST = (
    "+ torchrun --nproc_per_node=4 --nnodes=2 --node_rank=1 --master_addr=localhost "
    "--master_port=29500 train.py\n"
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 "
    "- Address already in use).\n"
)


def test_a_loopback_master_on_node_1_is_judged_by_master_addr_loopback() -> None:
    with spying("DDP214") as calls:
        findings = scan_text(NODE1_LOCALHOST)
    assert "DDP214" in [f.code for f in findings]
    network = calls[0].network
    assert network.master_addr == "localhost" and calls[0].plan.nnodes == 2
    found = next(f for f in findings if f.code == "DDP214")
    assert found.evidence["from_log_facts"]["node_rank"] == 1
    assert found.evidence["line"] == 1


def test_a_loopback_master_on_node_0_or_one_node_is_silent() -> None:
    assert "DDP214" not in codes(NODE1_LOCALHOST.replace("--node_rank=1", "--node_rank=0"))
    one_node = NODE1_LOCALHOST.replace("--nnodes=2", "--nnodes=1")
    assert "DDP214" not in codes(one_node)


# --- DDP230: a master port below 1024 -----------------------------------------------------------
def test_a_port_below_1024_with_a_store_that_never_answered_is_ddp230() -> None:
    text = (  # KimMeen/Time-LLM#158's --main_process_port 98, seen from a client
        "accelerate launch --num_processes 2 --main_process_port 98 run_main.py\n"
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
        "while trying to connect to (127.0.0.1, 98).\n"
    )
    findings = scan_text(text)
    assert findings[0].code == "DDP230"
    assert findings[0].evidence["from_log_facts"]["master_port"] == 98


def test_a_port_below_1024_that_worked_is_silent() -> None:
    assert "DDP230" not in codes("torchrun --master_port 443 train.py\nepoch 1 loss 0.3\n")


# --- DDP309: variables that differ between hosts ------------------------------------------------
def test_nccl_variables_that_differ_between_hosts_are_judged_by_env_differs() -> None:
    text = (  # NCCL's ENV lines (format: NVIDIA/nccl#367), one node with IB disabled
        "node-a:100:100 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0\n"
        "node-a:100:100 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\n"
        "node-b:200:200 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens5\n"
        "node-b:200:200 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
    )
    with spying("DDP309") as calls:
        findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP309"]  # the interface names rightly differ
    variables = {i.host: dict(i.variables) for i in calls[0].job.identities}
    assert variables["node-b"]["NCCL_IB_DISABLE"] == "1"
    assert findings[0].evidence["per_host"] == {"node-a": "0", "node-b": "1"}
    assert findings[0].evidence["line"] == 2


# --- DDP307: exit codes and signals per rank ----------------------------------------------------
def summary(*entries: tuple[int, str]) -> str:
    """torchrun's ChildFailedError table (format: torch 2.x, fixtures/logs/oom_killed_slurm)."""
    root, *others = entries
    text = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    text += "============================================================\ntrain.py FAILED\n"
    text += "------------------------------------------------------------\nFailures:\n"
    for number, (rank, code) in enumerate(others, 1):
        text += f"[{number}]:\n  time      : 2024-05-01_10:00:0{number}\n  host      : gpu-1\n"
        text += f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code}\n"
    text += "------------------------------------------------------------\n"
    text += "Root Cause (first observed failure):\n[0]:\n  time      : 2024-05-01_10:00:00\n"
    text += f"  host      : gpu-1\n  rank      : {root[0]} (local_rank: {root[0]})\n"
    text += f"  exitcode  : {root[1]}\n"
    text += "============================================================\n"
    return text


def test_exit_codes_of_the_failure_summary_are_judged_by_rank_crashed() -> None:
    with spying("DDP307") as calls:
        findings = scan_text(summary((2, "-9 (pid: 311)"), (0, "-15 (pid: 309)")))
    exits = {rank.rank: rank.exit_code for rank in calls[0].job.ranks}
    assert exits == {0: -15, 2: -9}
    read = next(f for f in findings if f.code == "DDP307").evidence["from_log_facts"]
    assert read["first_failed_rank"] == 2 and read["died_by_themselves"] == [2]
    assert read["ranks"] == {"2": "SIGKILL", "0": "SIGTERM"}


def test_ranks_torchrun_stopped_did_not_die_by_themselves() -> None:
    with spying("DDP307") as calls:
        findings = scan_text(summary((1, "-15 (pid: 310)")))
    assert calls and not list(collectives.rank_crashed(calls[0]))
    assert all("from_log_facts" not in f.evidence for f in findings)


def test_a_summary_in_a_folder_names_the_file_of_the_failing_rank(tmp_path) -> None:
    from ddp_doctor.logscan.inputs import scan_folder

    (tmp_path / "node0.log").write_text("epoch 1\nepoch 2\n")
    (tmp_path / "node1.log").write_text("epoch 1\n" + summary((5, "-9 (pid: 12)")))
    scan = scan_folder(tmp_path)
    found = next(f for f in scan.findings if f.code == "DDP307")
    assert found.evidence["from_log_facts"]["line"] == found.location.line
    assert found.location.path == str(tmp_path / "node1.log")
    assert any(where.startswith(str(tmp_path / "node1.log")) for where in scan.facts_read.values())


# --- DDP215: NCCL on loopback in a multi-node log ----------------------------------------------
def test_nccl_on_loopback_alone_in_a_multi_node_log_is_ddp215() -> None:
    text = (  # NCCL's own line when it found only lo (NVIDIA/nccl-tests#217), two nodes
        "torchrun --nnodes=2 --node_rank=0 --master_addr=10.0.0.5 train.py\n"
        "gpu-1:70918:70928 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
    )
    findings = scan_text(text)
    assert findings[0].code == "DDP215"
    assert findings[0].evidence["from_log_facts"]["interfaces"] == {"lo": "127.0.0.1"}


def test_nccl_on_loopback_on_one_machine_is_silent() -> None:
    text = "NAME :70918:70928 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
    assert codes(text) == []


def test_the_rank_fact_anchors_add_no_prefilter_pass() -> None:
    """Every fact anchor reuses a character the table's anchors are scanned for already."""
    from ddp_doctor.logscan.pattern import choose_suffixes
    from ddp_doctor.logscan.patterns import all_anchors
    from ddp_doctor.logscan.rankfacts import RANK_FACT_ANCHORS

    def firsts(anchors):
        return {suffix[0] for suffix in choose_suffixes(anchors).values()}

    without = tuple(a for a in all_anchors() if a not in RANK_FACT_ANCHORS)
    assert firsts(all_anchors()) == firsts(without)


def test_logs_v_shows_the_rank_facts_with_their_lines() -> None:
    facts = facts_of(PER_RANK_NCCL + summary((2, "-9 (pid: 311)")))
    shown = facts.lines()
    assert shown["NCCL 2.20.5 on rank 8"] == 2
    assert any(name.startswith("rank 2 ended with SIGKILL") for name in shown)
