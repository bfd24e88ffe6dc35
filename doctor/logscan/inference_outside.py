"""Conclusions about lines from outside the process group: a SIGTERM whose sender the log
does not name, and the connection errors of an HTTP client (a download, a web service) that
the store's and backends' codes would otherwise read as their own. Called by inference.py."""

from __future__ import annotations

from ddp_doctor.logscan.aggregate import CodeTally, Hints, LogHit
from ddp_doctor.logscan.hostnames import HTTP_CLIENT_WORDS
from ddp_doctor.logscan.patterns_hints import HTTP_CLIENT
from ddp_doctor.model import Severity

Tallies = dict[str, CodeTally]

# torchrun's agent on a signal: "Received 15 death signal" (1.x), "Received Signals.SIGTERM
# death signal" (2.x), "SignalException: Process N got signal: 15"
_TORCHRUN_SIGNAL_LINES = ("death signal, shutting down workers", "SignalException: Process")
_SIGTERM = ("SIGTERM", "15")
UNKNOWN_SENDER_NOTE = (
    "the log does not say who sent it (a scheduler, an orchestrator, a user's kill) or why: "
    "the SIGTERM is where the run ended, not its cause, which is an error before it, in this "
    "log or in the sender's"
)


def sigterm_of_an_unknown_sender(tallies: Tallies) -> None:
    """DDP507 names a job stopped from outside. A scheduler's line (a time limit, a
    preemption, a cancel), SIGINT (Ctrl-C) or SIGHUP (the terminal closed) say why; torchrun's
    SIGTERM alone says only that something outside stopped it (an orchestrator after another
    process failed, a harness killing a hang: determined-ai/determined#8915,
    PrimeIntellect-ai/prime-rl#1360), so it is a warning that says so. It keeps its place:
    the ranks' SIGTERM exits after it are still its consequences."""
    cancel = tallies.get("DDP507")
    if cancel is None or not all(_bare_sigterm(hit) for hit in cancel.kept):
        return
    cancel.judge(severity=Severity.WARNING, note=UNKNOWN_SENDER_NOTE)


def _bare_sigterm(hit: LogHit) -> bool:
    torchrun = any(words in hit.text for words in _TORCHRUN_SIGNAL_LINES)
    return torchrun and hit.facts.get("signal") in _SIGTERM


# Python's own socket exceptions, which an HTTP client's traceback shows before its own error
# (torch's C++ store and backends raise RuntimeError / DistNetworkError instead)
_PYTHON_SOCKET_ERRORS = (
    "socket.gaierror:",
    "ConnectionRefusedError:",
    "ConnectionResetError:",
    "OSError: [Errno 101]",
)
HTTP_CONNECTION_CODES = ("DDP203", "DDP206", "DDP210", "DDP234")  # the store's or backend's


def an_http_clients_errors(tallies: Tallies, hints: Hints) -> None:
    """DDP203, DDP206, DDP210 and DDP234 name the rendezvous' or the backend's connections. A
    failed lookup, refused or reset connection, or missing route that an HTTP client reports
    (urllib3, requests, httpx: a model download with no DNS, a web service that is down:
    huggingface/transformers#12575) is that client's: the process group never saw it. Such a
    code goes when every line of it is the client's, or Python's own socket exception in the
    client's traceback (the client's own error may follow it on a line of no code)."""
    if not hints.get(HTTP_CLIENT):
        return
    for code in HTTP_CONNECTION_CODES:
        tally = tallies.get(code)
        every_line_kept = tally is not None and tally.count <= len(tally.kept)
        if every_line_kept and all(_a_clients_line(hit.text) for hit in tally.kept):
            del tallies[code]


def _a_clients_line(text: str) -> bool:
    return any(words in text for words in (*HTTP_CLIENT_WORDS, *_PYTHON_SOCKET_ERRORS))
