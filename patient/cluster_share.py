"""Inside a multi-node job: every rank's journal and every node's facts travel to rank 0, and
node 0's verdict travels back, through the job's own TCPStore, before the ranks exit.

Files in the folder each node's doctor gives (`--cluster-dir`):
  node.json      written by this node's doctor before launch: its own probes
  cluster.json   written by rank 0: every journal and every node's node.json it received
  verdict.json   written on node 0 by its doctor after judging cluster.json; on the other
                 nodes by their local rank 0, as it came back through the store
A plain TCPStore client on MASTER_ADDR:MASTER_PORT (torchrun's store, which outlives the
ranks) carries them, so this works even when init_process_group failed. Every wait is bounded.
Standard library and torch only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from .journal import read_journal

PREFIX = "ddp_doctor/cluster/"
POSTED = PREFIX + "posted"
VERDICT = PREFIX + "verdict"
NO_VERDICT = json.dumps({"missing": "node 0's doctor gave no verdict in time"})
POLL_S = 0.1


def share(
    torch: Any, placement: dict[str, Any], journal: Path, folder: Path, wait_s: float
) -> None:
    """Posts this rank's journal (and, on a node's first rank, the node's facts); rank 0
    gathers them all and hands node 0's verdict back; each node's first rank receives it."""
    store = _connect(torch, wait_s)
    if store is None:
        return
    rank, local_rank = placement["rank"], placement["local_rank"]
    store.set(
        f"{PREFIX}journal/{rank}", json.dumps({**placement, "records": read_journal(journal)})
    )
    if local_rank == 0:
        store.set(f"{PREFIX}node/{placement['group_rank']}", _read(folder / "node.json") or "{}")
    store.add(POSTED, 1)
    if rank == 0:
        _gather(store, placement, folder, wait_s)
        _hand_back(store, folder, wait_s)
    elif local_rank == 0:
        _receive(store, folder, 2 * wait_s + 5)


def _connect(torch: Any, wait_s: float) -> Any:
    try:
        return torch.distributed.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=timedelta(seconds=wait_s),
            wait_for_workers=False,
        )
    except Exception:  # no store to reach: this node's report says the verdict never came
        return None


def _gather(store: Any, placement: dict[str, Any], folder: Path, wait_s: float) -> None:
    world, nodes = placement["world_size"], placement["group_world_size"]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and int(store.add(POSTED, 0)) < world:
        time.sleep(POLL_S)
    journals = _present(store, [f"{PREFIX}journal/{r}" for r in range(world)])
    node_docs = _present(store, [f"{PREFIX}node/{n}" for n in range(nodes)])
    document = {
        "world_size": world,
        "group_world_size": nodes,
        "journals": {key.rsplit("/", 1)[1]: json.loads(value) for key, value in journals.items()},
        "nodes": {key.rsplit("/", 1)[1]: json.loads(value) for key, value in node_docs.items()},
    }
    _write_atomically(folder / "cluster.json", json.dumps(document))


def _present(store: Any, keys: list[str]) -> dict[str, str]:
    found = {}
    for key in keys:
        with contextlib.suppress(Exception):
            if store.check([key]):
                found[key] = store.get(key).decode()
    return found


def _hand_back(store: Any, folder: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    verdict = None
    while verdict is None and time.monotonic() < deadline:
        verdict = _read(folder / "verdict.json")
        if verdict is None:
            time.sleep(POLL_S / 2)
    store.set(VERDICT, verdict or NO_VERDICT)


def _receive(store: Any, folder: Path, wait_s: float) -> None:
    with contextlib.suppress(Exception):  # no verdict in time: this node's report says so
        store.wait([VERDICT], timedelta(seconds=wait_s))
        _write_atomically(folder / "verdict.json", store.get(VERDICT).decode())


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
