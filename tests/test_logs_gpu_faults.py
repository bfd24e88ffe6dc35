"""The NVIDIA driver's Xid lines (issue 21): a hardware or driver fault is DDP236 and comes
before the CUDA, NCCL and watchdog errors it causes, whatever the lines' order; the Xids of the
application's own kernel are DDP512; the others stay silent. The tests assert codes and facts.
"""

from __future__ import annotations

import pytest
from log_scans import by_code, codes

from ddp_doctor.logscan.patterns_gpu import XID_APPLICATION, XID_FATAL, XID_RESET_PENDING

WATCHDOG_FAULT = (  # torch 2.6 ProcessGroupNCCL.cpp, as the watchdog reports a CUDA error
    "[rank1]:[E410 01:50:33.889423318 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 1] Process group watchdog thread terminated with exception: CUDA error: unspecified "
    "launch failure\n"
)


def xid_line(number: int, detail: str = "detail") -> str:
    """The driver's nvErrorLog format (open-gpu-kernel-modules)."""
    return f"kernel: NVRM: Xid (PCI:0000:3b:00): {number}, pid=4242, name=python, {detail}\n"


def test_the_number_sets_do_not_overlap() -> None:
    assert not XID_FATAL & XID_RESET_PENDING
    assert not (XID_FATAL | XID_RESET_PENDING) & XID_APPLICATION


@pytest.mark.parametrize("number", sorted(XID_FATAL))
def test_a_hardware_or_driver_xid_is_a_gpu_fault(number: int) -> None:
    finding = by_code(xid_line(number))["DDP236"]
    assert finding.evidence["xid"] == number
    assert finding.evidence["device"] == "0000:3b:00"
    assert finding.severity.word == "error"


@pytest.mark.parametrize("number", sorted(XID_RESET_PENDING))
def test_memory_that_needs_a_reset_is_a_warning(number: int) -> None:
    assert by_code(xid_line(number))["DDP236"].severity.word == "warning"


@pytest.mark.parametrize("number", sorted(XID_APPLICATION))
def test_the_applications_own_xids_are_a_cuda_fault(number: int) -> None:
    assert codes(xid_line(number)) == ["DDP512"]


@pytest.mark.parametrize("number", [3, 8, 45, 56, 69, 109, 999])
def test_other_xids_stay_silent(number: int) -> None:
    assert codes(xid_line(number)) == []


def test_a_number_is_read_whole() -> None:
    """Xid 790 is not 79, nor 4 a prefix of 48."""
    assert codes(xid_line(790)) == []
    assert codes(xid_line(4)) == []


def test_the_xid_comes_first_though_it_is_pasted_after_the_traceback() -> None:
    text = WATCHDOG_FAULT + xid_line(79, "GPU has fallen off the bus.")
    assert codes(text) == ["DDP236", "DDP512"]


def test_the_xid_comes_first_when_it_came_first() -> None:
    text = (
        xid_line(48, "An uncorrectable double bit error (DBE) has been detected") + WATCHDOG_FAULT
    )
    assert codes(text) == ["DDP236", "DDP512"]


def test_a_gpu_out_of_memory_keeps_its_place() -> None:
    oom = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    found = codes(oom + xid_line(63, "Row Remapper: New row marked for remapping"))
    assert found[0] == "DDP505" and "DDP236" in found


def test_dcgm_names_the_xid_and_the_gpu() -> None:
    finding = by_code("Detected XID 95 for GPU 2\n")["DDP236"]
    assert (finding.evidence["xid"], finding.evidence["gpu"]) == (95, 2)
    assert codes("Detected XID 13 for GPU 2\n") == []


def test_nccl_and_the_collective_timeout_after_a_lost_gpu_come_after_it() -> None:
    text = (  # NCCL enqueue.cc WARN form; torch 2.x watchdog timeout on the peer rank
        "node-1:1234:1300 [1] enqueue.cc:1566 NCCL WARN Cuda failure 'unknown error'\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:1182] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600104 milliseconds before timing out.\n"
        "Unable to determine the device handle for GPU 0000:3b:00.0: GPU is lost.  Reboot the "
        "system to recover this GPU\n"
    )
    found = codes(text)
    assert found[0] == "DDP236"
    assert {"DDP503", "DDP302"} <= set(found[1:])


def test_a_lost_gpu_names_its_bus_id() -> None:
    line = (
        "Unable to determine the device handle for GPU1: 0000:34:00.0: GPU is lost.  Reboot the "
        "system to recover this GPU\n"
    )
    assert by_code(line)["DDP236"].evidence["device"] == "0000:34:00.0"


def test_a_fault_comes_before_a_cause_judged_from_the_logs_facts() -> None:
    """A finding the probes' rules judge from the log's facts (here DDP204 on a multi-node
    connection to 127.0.1.1) does not outrank the GPU that fell off the bus."""
    from test_logfacts import GLOO_127011

    text = GLOO_127011 + xid_line(79, "GPU has fallen off the bus.")
    found = codes(text)
    assert "DDP204" in found
    assert found[0] == "DDP236"
