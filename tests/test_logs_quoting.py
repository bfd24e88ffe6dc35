"""DDP508 and DDP503 quote what the log already says (issue 21, item 4)."""

from __future__ import annotations

from log_scans import by_code

WARN = (
    "node1:100:200 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to "
    "10.0.0.2<43433> failed : Software caused connection abort\n"
)
SYSTEM_ERROR = (
    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error (run with "
    "NCCL_DEBUG=INFO for details), NCCL version 2.18.1\n"
)
INFO = "node1:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"


def test_a_system_error_with_its_warn_line_quotes_it_and_asks_for_no_rerun() -> None:
    system = by_code(WARN + SYSTEM_ERROR)["DDP508"]
    assert system.evidence["subsystem"].startswith("sockets")
    assert system.evidence["peer"] == "10.0.0.2"
    assert "socketStartConnect" in system.message
    assert system.fix is not None and system.fix.commands == ()


def test_a_bare_system_error_still_asks_for_nccl_debug() -> None:
    system = by_code(SYSTEM_ERROR)["DDP508"]
    assert system.fix is not None and any("NCCL_DEBUG=WARN" in c for c in system.fix.commands)


def test_warnings_in_an_info_log_ask_for_no_rerun() -> None:
    note = by_code(INFO + WARN)["DDP503"]
    assert note.fix is not None and note.fix.commands == ()
    assert note.evidence["peer"] == "10.0.0.2"
