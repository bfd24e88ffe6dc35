"""What the whole log changes about a line's finding (inference.py), the fixes chosen by how a
rank died (crash_fixes.py), and wordings whose only stable part is a number."""

from __future__ import annotations

import pytest
from log_scans import by_code, codes

from ddp_doctor.logscan.crash_fixes import crash_fix, signal_name
from ddp_doctor.logscan.patterns_training import DATAPARALLEL_DEVICE_FIX

SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : h
  rank      : {rank} (local_rank: {rank})
  exitcode  : {exitcode} (pid: 10)
  error_file: <N/A>
  traceback : {traceback}
============================================================"""
WATCHDOG = (
    "[rank{rank}]:[E1206 18:44:12.715 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=1800000) ran for 1800013 milliseconds before timing out."
)
TOKENIZING = "Running tokenizer on dataset:  97%|#########7| 970/1000 [31:02<00:57, 1.1ba/s]"
EADDRINUSE = (
    "{prefix}torch.distributed.DistNetworkError: The server socket has failed to listen on any "
    "local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
    "address already in use"
)
CLOSED = (
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
    "closed by peer [10.0.0.2]:5312"
)


# --- DDP307's fix by how the rank died ----------------------------------------------------
@pytest.mark.parametrize(
    ("exitcode", "traceback", "words"),
    [
        (-9, "Signal 9 (SIGKILL) received by PID 10", "out-of-memory killer"),
        (-6, "Signal 6 (SIGABRT) received by PID 10", "abort"),
        (-11, "Signal 11 (SIGSEGV) received by PID 10", "segmentation fault"),
        (
            1,
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "record",
        ),
        (
            2,
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "usage",
        ),
    ],
)
def test_the_root_cause_gets_the_fix_of_its_exit_code(
    exitcode: int, traceback: str, words: str
) -> None:
    text = SUMMARY.format(rank=1, exitcode=exitcode, traceback=traceback)
    crashed = by_code(text)["DDP307"]
    assert crashed.fix is not None and words in crashed.fix.text, crashed.fix


@pytest.mark.parametrize(
    ("facts", "signal"),
    [
        ({"exitcode": 137}, "SIGKILL"),
        ({"exitcode": -11}, "SIGSEGV"),
        ({"signal": "sigbus"}, "SIGBUS"),
        ({"exitcode": -15}, "SIGTERM"),
    ],
)
def test_shell_and_launcher_forms_of_a_signal_pick_its_fix(
    facts: dict[str, object], signal: str
) -> None:
    assert crash_fix(facts) is crash_fix({"signal": signal}) is not None
    assert signal_name(137) == "SIGKILL" and signal_name(1) is None


def test_a_bare_sigkill_is_the_ranks_death_not_a_memory_guess() -> None:
    text = SUMMARY.format(rank=3, exitcode=-9, traceback="Signal 9 (SIGKILL) received by PID 10")
    assert codes(text) == ["DDP307"]
    crashed = by_code(text)["DDP307"]
    assert crashed.evidence["signal"] == "SIGKILL"
    commands = " ".join(crashed.fix.commands) if crashed.fix else ""
    assert all(word in commands for word in ("dmesg", "sacct", "terminated.reason")), commands


@pytest.mark.parametrize(
    "memory_line",
    [
        "kernel: Out of memory: Killed process 10 (python)",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9.0. Some of your processes "
        "may have been killed by the cgroup out-of-memory handler.",
    ],
)
def test_a_sigkill_with_memory_evidence_is_the_memory_kill(memory_line: str) -> None:
    summary = SUMMARY.format(rank=3, exitcode=-9, traceback="Signal 9 (SIGKILL) received by PID 10")
    for text in (memory_line + "\n" + summary, summary + "\n" + memory_line):
        assert codes(text)[:2] == ["DDP504", "DDP307"], text
        assert "likely" not in by_code(text)["DDP504"].evidence


# DataLoader's own words for its worker's signal (torch/utils/data/_utils/signal_handling.py;
# alibaba/Pai-Megatron-Patch#583, pytorch/pytorch#4507)
DATALOADER_KILLED = "[rank0]: RuntimeError: DataLoader worker (pid 9382) is killed by signal: {}."


@pytest.mark.parametrize(
    ("words", "signal"),
    [("Killed", "SIGKILL"), ("Segmentation fault", "SIGSEGV"), ("Terminated", "SIGTERM")],
)
def test_a_dataloader_worker_killed_by_a_signal_names_the_signal(words: str, signal: str) -> None:
    text = DATALOADER_KILLED.format(words)
    assert codes(text) == ["DDP307"]  # not DDP504: a SIGKILL says nothing about memory by itself
    killed = by_code(text)["DDP307"]
    assert killed.evidence["signal"] == signal and killed.evidence["pid"] == 9382
    assert killed.fix is crash_fix({"signal": signal})


def test_a_dataloader_worker_sigkill_with_memory_evidence_is_the_memory_kill() -> None:
    text = DATALOADER_KILLED.format("Killed") + "\nkernel: Out of memory: Killed process 9382 (pt)"
    assert codes(text)[:2] == ["DDP504", "DDP307"]


def test_the_entry_of_a_torchrun_summary_cut_above_its_table_names_the_signal() -> None:
    text = (  # NVIDIA/Megatron-LM#1880: only the entry's fields were pasted
        "  rank      : 0 (local_rank: 0)\n  exitcode  : -11 (pid: 6421)\n"
        "  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 6421\n"
    )
    crashed = by_code(text)["DDP307"]
    # the summary's own keys (patterns_ranks._summary_line_role), the signal's own fix
    assert crashed.evidence["killed_by"] == "SIGSEGV" and crashed.fix is crash_fix(
        {"signal": "SIGSEGV"}
    )


def test_torch_1_x_bare_store_timeout_is_ddp231() -> None:
    text = (  # torch <= 1.6 under the TCPStore frame (yangkky/distributed_tutorial#3)
        "    store = TCPStore(master_addr, master_port, world_size, start_daemon)\n"
        "RuntimeError: Connection timed out\n"
    )
    assert codes(text) == ["DDP231"]
    assert "DDP231" not in codes("RuntimeError: Connection timed out while reading the dataset\n")


def test_rays_out_of_memory_advice_alone_is_the_memory_monitor() -> None:
    text = (  # ray-project/ray#44574: the headline of the kill message was cut
        "(raylet) Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.\n"
    )
    assert codes(text) == ["DDP504"]


@pytest.mark.parametrize(
    "line",
    [  # Ray >= 2.2 (ray-project/ray#30312), Ray 2.0 - 2.1 (ray-project/ray#28774)
        "Memory on the node (IP: 172.17.0.2, ID: 8c5a14) where the task (task ID: 41617b, "
        "name=allocate_memory, pid=548, memory used=12.18GB) was running was 21.91GB / 33.28GB "
        "(0.658192), which exceeds the memory usage threshold of 0.65. Ray killed this worker",
        "(raylet, ip=172.31.66.10) [2022-09-22 16:02:34,214 E 138 138] (raylet) "
        "node_manager.cc:2966: System memory low at node with IP 172.31.66.10. Used memory "
        "(54.90GB) / total capacity (57.60GB) (0.95307) exceeds threshold 0.95, killing latest "
        "task with name  and task ID NIL_ID to avoid running out of memory.",
    ],
)
def test_rays_memory_monitor_across_versions_is_ddp504(line: str) -> None:
    assert codes(line) == ["DDP504"]


@pytest.mark.parametrize(
    "line",  # srun's line as pasted: plain, quoted, in a CloudWatch-style table
    [
        "srun: error: c002: task 0: Killed",
        "> srun: error: c002: task 0: Killed",
        "| 1690000000000 | srun: error: c002: task 0: Killed |",
    ],
)
def test_srun_task_killed_is_read_however_it_was_pasted(line: str) -> None:
    assert by_code(line)["DDP307"].evidence["signal"] == "SIGKILL"


def test_a_container_exit_137_alone_names_sigkill() -> None:
    text = "task failed: container terminated with exit code (137)"
    assert codes(text) == ["DDP307"]
    assert by_code(text)["DDP307"].evidence.get("signal") == "SIGKILL"


# --- the torchrun summary, retyped ----------------------------------------------------------
def test_a_retyped_summary_with_fields_run_together_is_read() -> None:
    text = (
        "ChildFailedError:\nroot cause (first observed failure):\n[0]\n"
        "  rank: 5 (local_rank: 1)exitcode: -11 (pid: 77)error_file: <N/A>\n"
        "  traceback: signal 11 (sigsegv) received by PID 77\n"
    )
    crashed = by_code(text)["DDP307"]
    assert (crashed.evidence["rank"], crashed.evidence["local_rank"]) == (5, 1)
    assert (crashed.evidence["exitcode"], crashed.evidence["signal"]) == (-11, "SIGSEGV")


# --- rank 0's solo work ----------------------------------------------------------------------
def test_ranks_timing_out_while_rank_0_tokenises_is_ddp232_first() -> None:
    text = "\n".join([TOKENIZING, WATCHDOG.format(rank=1), WATCHDOG.format(rank=2)])
    assert codes(text) == ["DDP232", "DDP302"]
    assert by_code(text)["DDP232"].evidence["elapsed"] == "31:02"


def test_a_progress_bar_after_the_timeout_explains_nothing() -> None:
    assert codes("\n".join([WATCHDOG.format(rank=1), TOKENIZING])) == ["DDP302"]


def test_a_progress_bar_alone_is_no_finding() -> None:
    assert codes(TOKENIZING + "\n") == []


# --- same rank on every process ---------------------------------------------------------------
def test_eaddrinuse_from_a_rank_that_is_not_0_is_ddp233() -> None:
    assert codes(EADDRINUSE.format(prefix="[rank1]: ")) == ["DDP233"]
    assert codes(EADDRINUSE.format(prefix="[rank0]: ")) == ["DDP201"]


def test_a_rank_that_failed_first_for_another_reason_does_not_make_eaddrinuse_ddp233() -> None:
    # pytorch/pytorch#129367: a port taken by another job; rank 0 reports EADDRINUSE, the others
    # only time out, and torchrun may name one of them as the first failure
    timeout = "Traceback: torch.distributed.DistStoreError: Socket Timeout"
    text = (
        EADDRINUSE.format(prefix="") + "\n" + SUMMARY.format(rank=3, exitcode=1, traceback=timeout)
    )
    assert "DDP233" not in codes(text) and codes(text)[0] == "DDP201"


def test_a_rank_that_failed_first_on_the_bind_is_ddp233() -> None:
    bind = "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)"
    text = EADDRINUSE.format(prefix="") + "\n" + SUMMARY.format(rank=3, exitcode=1, traceback=bind)
    assert codes(text)[0] == "DDP233"


# --- a peer that left -----------------------------------------------------------------------------
def test_a_closed_connection_after_a_crash_stays_a_symptom() -> None:
    oom = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert codes("\n".join([oom, CLOSED])) == ["DDP505", "DDP234"]


def test_a_closed_connection_with_no_error_anywhere_is_the_cause() -> None:
    peer = by_code(CLOSED)["DDP234"]
    assert "left its loop early" in peer.message and peer.fix and "join" in peer.fix.text


# --- DataParallel ---------------------------------------------------------------------------------
DEVICES = (
    "RuntimeError: Expected all tensors to be on the same device, but found at least two "
    "devices, cuda:1 and cuda:0!"
)


def test_device_errors_under_dataparallel_get_dataparallels_fix() -> None:
    frame = '  File "/opt/torch/nn/parallel/data_parallel.py", line 171, in forward'
    assert by_code(f"{frame}\n{DEVICES}\n")["DDP509"].fix is DATAPARALLEL_DEVICE_FIX
    assert by_code(DEVICES)["DDP509"].fix is not DATAPARALLEL_DEVICE_FIX


# --- wordings where only the number is stable -------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "code"),
    [
        (
            "The server socket has failed to bind to [pc]:29500 (system error: 10048 - Xyz.).",
            "DDP201",
        ),
        (
            "The server socket has failed to bind to [::]:29500 (errno: 98 - Adresse déjà utilisée).",
            "DDP201",
        ),
        (
            "The client socket has failed to connect to [node0]:29500 (system error: 10060 - Xyz.).",
            "DDP231",
        ),
        (
            "The server socket has failed to bind to [::]:80 (errno: 13 - Keine Berechtigung).",
            "DDP230",
        ),
        (
            "The server socket has failed to bind to [pc]:50123 (system error: 10013 - Xyz.).",
            "DDP235",
        ),
        ("Gloo connectFullMesh failed with ... (system error: 10061 - Xyz.)", "DDP206"),
    ],
)
def test_localised_socket_errors_are_read_by_their_number(line: str, code: str) -> None:
    assert codes(line) == [code]
