"""Consequences stay behind their cause (issue 21, item 2)."""

from __future__ import annotations

from ddp_doctor.logscan import LogScanner
from ddp_doctor.logscan.pattern import Role

CANCEL = "slurmstepd: error: *** STEP 6053.0 ON node1 CANCELLED AT 2024-04-23T12:18:08 ***\n"
AFTER = (  # what torchrun and the peers print once SLURM stopped the step
    "E0423 12:18:09.000000 1 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: -15) local_rank: 0 (pid: 2630) of binary: /usr/bin/python\n"
    "[rank1]: RuntimeError: Connection closed by peer [10.0.0.2]:41234\n"
)
FAULT = "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
IB = (
    "n2:1:2 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
    "10.0.0.1<41202> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n"
)
STUCK = (
    "[rank0]:[E ProcessGroupNCCL.cpp:1169] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck "
    "for 600 seconds without making progress in monitoring enqueued collectives.\n"
)


def roles(text: str) -> list[tuple[str, Role]]:
    scanner = LogScanner()
    scanner.feed(text.encode())
    return [(finding.code, role) for role, finding in scanner.results()]


def test_everything_after_a_cancel_is_its_consequence() -> None:
    found = roles(CANCEL + AFTER)
    assert found[0] == ("DDP507", Role.CAUSE)
    assert all(role == Role.SYMPTOM for _, role in found[1:]) and len(found) > 1


def test_transport_errors_and_a_stuck_watchdog_after_a_cuda_fault_follow_it() -> None:
    found = roles(FAULT + IB + STUCK)
    assert found[0] == ("DDP512", Role.CAUSE)
    assert {code: role for code, role in found[1:]} == {
        "DDP514": Role.SYMPTOM,
        "DDP513": Role.SYMPTOM,
    }


def test_an_ib_error_with_no_crash_is_the_cause() -> None:
    assert roles(IB)[0] == ("DDP514", Role.CAUSE)
