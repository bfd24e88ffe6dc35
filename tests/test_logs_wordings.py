"""Wordings of known causes (issue 21): those added after corpus D's tuning half was measured,
each a real line from the public thread named beside it, and the wording audit's table
(fixtures/logs/wordings/wordings.tsv), each a message as its software prints it. The tests
assert codes.
"""

from __future__ import annotations

import pytest
from log_scans import codes
from wordings_table import Wording, read_table

from ddp_doctor.logscan import scan_text


def test_nccl_ras_mismatch_report_is_mismatched_collectives() -> None:
    text = (  # NVIDIA/nccl#1911: NCCL >= 2.24's RAS client
        "#0-0 (fa93daea854b060b) MISMATCH\n"
        "  Communicator ranks have different AllGather operation counts\n"
        "  30 ranks have launched up to operation 640\n"
        "  2 ranks have launched up to operation 641\n"
    )
    findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP304"]
    assert findings[0].evidence["op_type"] == "AllGather"


def test_operation_counts_elsewhere_are_not_a_mismatch() -> None:
    assert codes("profiler: operation counts per kernel: 12\n") == []


def test_verbs_retry_counter_wording_is_the_ib_transport() -> None:
    text = (  # openucx/ucx#1880 (mpirun --tag-output --timestamp-output prefixes)
        "Sun Oct  1 17:01:10 2017[1,30]<stdout>:[1506866470.744682] [clx-hercules-065:1411 :0]"
        "       dc_verbs.c:633  UCX  ERROR Send completion with error on qp 0x10e55: transport "
        "retry counter exceeded syndrome 0x81\n"
    )
    assert codes(text) == ["DDP514"]


def test_a_container_runtime_oom_kill_is_host_out_of_memory() -> None:
    text = (  # kubeflow/trainer#1661
        'Warning  Failed  113s   kubelet  Error: container create failed: time="2022-09-14T11:35'
        ':13Z" level=error msg="runc create failed: unable to start container process: '
        'container init was OOM-killed (memory limit too low?)"\n'
    )
    findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP504"]
    assert findings[0].evidence["killer"] == "runc"


def test_an_ipv6_lookup_the_resolver_failed_is_an_unresolvable_name() -> None:
    text = (  # nyu-systems/Grendel-GS#9: fixed by adding the host name to /etc/hosts
        "[W socket.cpp:601] [c10d] The IPv6 network addresses of (user, 53821) cannot be "
        "retrieved (gai error: -3 - Temporary failure in name resolution).\n"
    )
    assert codes(text) == ["DDP203"]


def test_an_ipv6_lookup_with_no_such_address_stays_silent() -> None:
    text = (  # karpathy/nanochat#42: c10d falls back to IPv4
        "[W1014 16:41:26.522544000 socket.cpp:755] [c10d] The IPv6 network addresses of "
        "(Os-MacBook-Air.local, 59319) cannot be retrieved (gai error: 8 - nodename nor "
        "servname provided, or not known).\n"
    )
    assert codes(text) == []


# --- after corpus D's held half was measured (no longer held out) -------------------------------
def test_a_fault_text_cut_by_a_wrapped_line_is_a_cuda_fault() -> None:
    text = (  # vllm-project/vllm#5537, wrapped inside "memory" as pasted
        "(RayWorkerWrapper pid=14390) [rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 2 Rank 1] "
        "Process group watchdog thread terminated with exception: CUDA error: an illegal me\n"
        "mory access was encountered\n"
    )
    assert codes(text) == ["DDP512"]


def test_another_cuda_error_of_the_watchdog_is_not_a_fault() -> None:
    text = (
        "[rank0]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 0] Process group watchdog thread "
        "terminated with exception: CUDA error: operation not permitted when stream is capturing\n"
    )
    assert "DDP512" not in codes(text)


def test_slurmstepd_rpc_errors_after_a_requeue_are_not_refused_connections() -> None:
    text = (  # facebookincubator/submitit#1708
        "slurmstepd: error: *** JOB 608 ON SERVER_NAME CANCELLED AT 2022-08-12T02:06:12 DUE TO "
        "JOB REQUEUE ***\n"
        "slurmstepd: error: Failed to send MESSAGE_TASK_EXIT: Connection refused\n"
    )
    assert codes(text) == ["DDP507"]


# --- the wording audit: fixtures/logs/wordings/wordings.tsv ------------------------------------
# Each row is a message the software itself prints (torch, NCCL, gloo, UCX, libfabric,
# aws-ofi-nccl, SLURM, the kernel, Ray, the kubelet, launchers), with its source; the row's
# code is the cause `logs` must put first, `none` a text that names no cause by itself.
WORDINGS = read_table()


def test_the_wordings_table_covers_every_family() -> None:
    expected = {wording.expected for wording in WORDINGS}
    families = {"DDP201", "DDP202", "DDP203", "DDP205", "DDP206", "DDP231", "DDP234", "DDP302"}
    families |= {"DDP304", "DDP307", "DDP504", "DDP505", "DDP507", "DDP512", "DDP513"}
    families |= {"DDP236", "DDP514", "DDP515", "none"}
    assert families <= expected
    assert all(wording.source.strip() for wording in WORDINGS)


@pytest.mark.parametrize("wording", WORDINGS, ids=[wording.id for wording in WORDINGS])
def test_a_wording_gives_its_cause_first(wording: Wording) -> None:
    found = codes(wording.text)
    assert (found[0] if found else "none") == wording.expected, wording.source


def test_a_summary_line_read_alone_adds_nothing_to_the_root_cause() -> None:
    """Inside a whole ChildFailedError summary, the row for a summary cut below its Root Cause
    line also reads the other failures' lines; the root cause keeps its own facts."""
    text = (  # pytorch/pytorch torch/distributed/elastic/multiprocessing/errors (2.x layout)
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 76628)\n"
        "  traceback : Signal 9 (SIGKILL) received by PID 76628\n"
        "Root Cause (first observed failure):\n[0]:\n  host      : node-1\n"
        "  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 76627)\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )
    findings = scan_text(text)
    assert [f.code for f in findings] == ["DDP307"]
    assert findings[0].evidence["exitcode"] == 1
    assert "signal" not in findings[0].evidence
