"""torch's debug server (torch.distributed.debug.start_debug_server), where the job started
one: its HTTP frontend runs in a child process of rank 0 (port 25999 unless the script chose
another) and gathers every rank's flight recorder at /fr_trace_json, one
`<h2>Rank N: ADDR</h2>` heading and `<pre>JSON</pre>` per rank (torch 2.13,
torch/distributed/debug/_frontend.py, JSON_RESP_TEMPLATE; the JSON is what
_dump_fr_trace_json returns). Asked only on a port a child of a rank listens on, never on
the ranks' own ports (gloo's and the store's)."""

from __future__ import annotations

import contextlib
import html
import os
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import psutil

from ddp_doctor.facts.attach import RecorderPace
from ddp_doctor.facts.collectives import CollectiveCall
from ddp_doctor.flightrec.dumps import DumpError, read_dump
from ddp_doctor.probes.attach.flightrec import KEEP_ENTRIES
from ddp_doctor.probes.attach.recorder_pace import recent_pace

MAX_PAGE_BYTES = 32 << 20
RANK_BLOCK = re.compile(
    r"<h2>Rank (\d+): [^<]*</h2>\s*(?:<p>Failed to fetch: status=(\d+)</p>\s*)?<pre>(.*?)</pre>",
    re.S,
)


class DebugServerError(Exception):
    """The frontend did not answer as documented."""


def frontend_ports(rank_pids: Sequence[int]) -> list[int]:
    """TCP ports that a multiprocessing child of a rank listens on: torch starts the frontend
    as a multiprocessing.Process of rank 0 (a fork has the rank's own command line, spawn and
    forkserver children name multiprocessing); DataLoader workers listen on none, and other
    services a job starts (an experiment tracker's) have command lines of their own."""
    ranks_own = {port for pid in rank_pids for port in _listening(pid)}
    ports: set[int] = set()
    for pid in rank_pids:
        with contextlib.suppress(psutil.Error):
            rank = psutil.Process(pid)
            own = rank.cmdline()
            for child in rank.children():
                with contextlib.suppress(psutil.Error):
                    line = child.cmdline()
                    if line != own and "multiprocessing" not in " ".join(line):
                        continue
                    ports |= _listening(child.pid)
    # A forked child holds its rank's listening sockets too (gloo's, the store's): never those.
    return sorted(ports - ranks_own)


def _listening(pid: int) -> set[int]:
    with contextlib.suppress(psutil.Error):
        connections = psutil.Process(pid).net_connections(kind="tcp")
        return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
    return set()


def flight_records(port: int, timeout_s: float) -> dict[int, tuple[CollectiveCall, ...]]:
    """rank -> its last flight-recorder entries, from the frontend's /fr_trace_json."""
    return {rank: calls for rank, (calls, _) in ranks_read(port, timeout_s).items()}


def ranks_read(
    port: int, timeout_s: float
) -> dict[int, tuple[tuple[CollectiveCall, ...], RecorderPace | None]]:
    """rank -> (its last entries, the pace of its collectives): the frontend gathers every
    rank's flight recorder when asked, so its pages are as fresh as a dump asked for now."""
    page = _get(f"http://127.0.0.1:{port}/fr_trace_json", timeout_s)
    found = {}
    for rank, failed, body in RANK_BLOCK.findall(page):
        if failed:
            continue
        read = _calls(html.unescape(body))
        if read is not None:
            found[int(rank)] = read
    if not found and "<h2>Rank" not in page:
        raise DebugServerError(f"port {port} is not torch's debug server frontend")
    return found


def _get(url: str, timeout_s: float) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    try:
        with opener.open(url, timeout=timeout_s) as response:
            return response.read(MAX_PAGE_BYTES).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise DebugServerError(f"{url}: {getattr(error, 'reason', error)}") from None


def _calls(text: str) -> tuple[tuple[CollectiveCall, ...], RecorderPace | None] | None:
    """The one flight-recorder reader reads it (it takes a file: one in a private folder)."""
    with tempfile.TemporaryDirectory(prefix="ddp-doctor-attach-") as folder:
        path = Path(folder) / "debug_server_rank"
        path.write_text(text)
        os.chmod(path, 0o600)
        try:
            dump = read_dump(path)
        except DumpError:
            return None
        pace = recent_pace(path)
    return tuple(call for call in dump.entries[-KEEP_ENTRIES:] if not call.point_to_point), pace
