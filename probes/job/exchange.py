"""The doctor's side of a multi-node job's exchange (the ranks' side is cluster_share.py).

Before launch it writes this node's facts (node.json) for its first rank to post; while the
job runs it watches for rank 0's cluster.json and answers it with node 0's verdict (the
`decide` callback judges it) so that rank 0 can hand the verdict to every node before the
ranks exit; afterwards it keeps what came back. It also notices when this node's ranks are
all gone but torchrun still waits in its exit barrier for another node's agent (up to 300 s
in torch): the job is over for this node then. On the node that hosts torchrun's store it
notes which addresses hold a connection to the store's port (/proc/net/tcp): the nodes that
arrived, which torchrun counts but does not name.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ddp_doctor.probes.runner import descendants

Decide = Callable[[Mapping[str, Any]], Mapping[str, Any]]
EXIT_BARRIER_GRACE_S = 5.0
CHECK_EVERY_S = 1.0


class ClusterExchange:
    def __init__(
        self, node_document: Mapping[str, Any], decide: Decide, store_port: int | None = None
    ) -> None:
        self.node_document = node_document
        self.decide = decide
        self.store_port = store_port  # where this node hosts torchrun's store; None elsewhere
        self.store_peers: dict[str, None] = {}
        self.folder: Path | None = None
        self.cluster_document: Mapping[str, Any] | None = None  # node 0 only
        self.verdict: Mapping[str, Any] | None = None
        self._answered = False
        self._peers_noted_at = 0.0
        self._workers_seen = False
        self._workers_gone_at: float | None = None
        self._checked_at = 0.0

    def prepare(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "node.json").write_text(json.dumps(self.node_document, default=str))
        self.folder = folder
        return folder

    def poll(self) -> None:
        """Answers rank 0's cluster.json once, while the ranks wait for it; notes who holds a
        connection to the store this node hosts."""
        self._note_store_peers()
        if self._answered or self.folder is None:
            return
        document = _read_json(self.folder / "cluster.json")
        if document is None:
            return
        self._answered = True
        self.cluster_document = document
        verdict = self.decide(document)
        partial = self.folder / "verdict.partial"
        partial.write_text(json.dumps(verdict, default=str))
        os.replace(partial, self.folder / "verdict.json")

    def _note_store_peers(self) -> None:
        now = time.monotonic()
        if self.store_port is None or now - self._peers_noted_at < CHECK_EVERY_S:
            return
        self._peers_noted_at = now
        self.store_peers.update(dict.fromkeys(connected_to(self.store_port)))

    def finish(self) -> None:
        """Reads what came back before the job's folder is removed."""
        if self.folder is None:
            return
        if self.cluster_document is None:
            self.cluster_document = _read_json(self.folder / "cluster.json")
        self.verdict = _read_json(self.folder / "verdict.json")

    def only_exit_barrier_left(self, torchrun_pid: int) -> bool:
        """True once this node's ranks have all exited and torchrun has lingered past the
        grace: its agent waits in the exit barrier for a node that will not come."""
        now = time.monotonic()
        if now - self._checked_at < CHECK_EVERY_S:
            return False
        self._checked_at = now
        if not Path("/proc").is_dir():
            return False
        if descendants(torchrun_pid):
            self._workers_seen, self._workers_gone_at = True, None
            return False
        if not self._workers_seen:
            return False  # still in the rendezvous: no rank started yet
        self._workers_gone_at = self._workers_gone_at or now
        return now - self._workers_gone_at >= EXIT_BARRIER_GRACE_S


ESTABLISHED = "01"


def connected_to(port: int, proc_net: Path = Path("/proc/net")) -> list[str]:
    """Remote addresses of established TCP connections to this machine's `port` (Linux)."""
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        try:
            lines = (proc_net / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != ESTABLISHED:
                continue
            local, remote = fields[1].split(":"), fields[2].split(":")
            if int(local[1], 16) == port and len(remote[0]) == width:
                found.append(_address(remote[0]))
    return list(dict.fromkeys(found))


def _address(hex_address: str) -> str:
    """/proc/net/tcp writes each 32-bit word of the address in host (little-endian) order."""
    words = [bytes.fromhex(hex_address[i : i + 8])[::-1] for i in range(0, len(hex_address), 8)]
    packed = b"".join(words)
    if len(packed) == 16 and packed[:12] == b"\0" * 10 + b"\xff" * 2:
        packed = packed[12:]  # an IPv4 client on an IPv6 socket
    return socket.inet_ntop(socket.AF_INET if len(packed) == 4 else socket.AF_INET6, packed)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
