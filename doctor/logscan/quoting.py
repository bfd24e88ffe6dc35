"""DDP508 and DDP503 say what the log already says: the NCCL WARN line behind an "unhandled
system error", its subsystem and peer; a rerun with more NCCL_DEBUG is asked for only when the
log holds nothing more to read."""

from __future__ import annotations

import re

from ddp_doctor.logscan.aggregate import CodeTally
from ddp_doctor.logscan.logfacts import LogFacts
from ddp_doctor.model import Remediation

WARN_CODES = ("DDP514", "DDP515", "DDP503")  # codes whose lines are NCCL WARN lines
_SOURCE = re.compile(r"\b([\w/]+)\.(?:cc|cu|h):\d+ NCCL WARN")
_PEER = (re.compile(r"Connect to ([\w.:%-]+)<\d+>"), re.compile(r"peer ([\w.:%-]+?)<\d+>"))
SUBSYSTEMS = (  # NCCL's source file -> what it is (src/ layout of 2.4 - 2.28)
    ("net_ib", "NET/IB (InfiniBand verbs)"),
    ("ibvwrap", "NET/IB (InfiniBand verbs)"),
    ("net_socket", "NET/Socket"),
    ("socket", "sockets (bootstrap or NET/Socket)"),
    ("shm", "shared memory (/dev/shm)"),
    ("bootstrap", "bootstrap"),
    ("proxy", "the proxy thread"),
    ("enqueue", "kernel launch (CUDA)"),
    ("alloc", "CUDA memory allocation"),
    ("p2p", "P2P (CUDA IPC)"),
    ("nvls", "NVLink SHARP (NVLS)"),
    ("init", "communicator init"),
)


def quote_nccl_warnings(tallies: dict[str, CodeTally], facts: LogFacts) -> None:
    """Adds to DDP508 and DDP503 the WARN line the log holds and what it names."""
    warn = next((tallies[code] for code in WARN_CODES if code in tallies), None)
    info_on = bool(facts.interfaces or facts.env or facts.nccl_versions)
    system = tallies.get("DDP508")
    if system is not None and warn is not None:
        said = _what_it_says(warn)
        system.judge(
            note=f"NCCL's own WARN line (line {warn.primary.line}) names the failing call: "
            f"{said['quote']}",
            evidence={key: value for key, value in said.items() if value},
            fix=Remediation(
                f"Follow the WARN line the log already holds (line {warn.primary.line}, "
                f"{said['subsystem'] or 'NCCL'}): it is the call that failed"
                + (f"; the peer is {said['peer']}" if said["peer"] else "")
                + ". A rerun with more NCCL_DEBUG is not needed for it."
            ),
        )
    notes = tallies.get("DDP503")
    if notes is not None:
        said = _what_it_says(notes)
        evidence = {key: value for key, value in said.items() if value and key != "quote"}
        if info_on:
            fix = Remediation(
                "Read the NCCL WARN lines quoted here"
                + (f" ({said['subsystem']})" if said["subsystem"] else "")
                + ": they name the call that failed; this log already has NCCL_DEBUG=INFO "
                "output around them, so no rerun is needed to see the setup steps."
            )
            notes.judge(evidence=evidence, fix=fix)
        elif evidence:
            notes.judge(evidence=evidence)


def _what_it_says(tally: CodeTally) -> dict[str, str | None]:
    text = tally.primary.text
    source = _SOURCE.search(text)
    subsystem = None
    if source:
        name = source.group(1).rsplit("/", 1)[-1]
        subsystem = next((what for key, what in SUBSYSTEMS if key in name), source.group(1))
    peers = (regex.search(text) for regex in _PEER)
    peer = next((m.group(1) for m in peers if m), None)
    quote = text.split("NCCL WARN", 1)[-1].strip() if "NCCL WARN" in text else text.strip()
    return {"quote": f"'{quote[:200]}'", "subsystem": subsystem, "peer": peer}
