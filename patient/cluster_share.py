"""Inside a multi-node job: every rank's journal and every node's facts travel to rank 0, and
node 0's verdict travels back, through the job's own TCPStore, before the ranks exit.

What travels scales with what differs, not with the node count: each rank's fingerprint
(versions, libnccl mapped, variables, GPU model, driver) and each node's own facts go by
digest, and only the first rank (node) with a digest new to the store sends the whole; the
journals carry the digest and each rank's own fields (rank, device, bus id ...).

Files in the folder each node's doctor gives (`--cluster-dir`):
  node.json      written by this node's doctor before launch: its own probes and their digest
  cluster.json   written by rank 0: every journal, every node's entry, every distinct
                 fingerprint and node facts it received
  verdict.json   written on node 0 by its doctor after judging cluster.json; on the other
                 nodes by their local rank 0, as it came back through the store
A plain TCPStore client on MASTER_ADDR:MASTER_PORT (torchrun's store, which outlives the
ranks) carries them, so this works even when init_process_group failed. Every wait is bounded.
Standard library and torch only.
"""

from __future__ import annotations

import contextlib
import hashlib
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
BATCH = 512  # keys per multi_get
# The fields of a rank's identity that are its own; the rest is the fingerprint to compare.
OWN_FIELDS = (
    "rank", "local_rank", "host", "pid", "device", "pci_bus_id", "cpu_affinity", "group_rank",
)  # fmt: skip


def share(
    torch: Any, placement: dict[str, Any], journal: Path, folder: Path, wait_s: float
) -> None:
    """Posts this rank's journal (and, on a node's first rank, the node's facts); rank 0
    gathers them all and hands node 0's verdict back; each node's first rank receives it."""
    store = connect_store(torch, wait_s)
    if store is None:
        return
    post(store, placement, read_journal(journal), _read(folder / "node.json"))
    rank, local_rank = placement["rank"], placement["local_rank"]
    if rank == 0:
        gather(store, placement, folder, wait_s)
        _hand_back(store, folder, wait_s)
    elif local_rank == 0:
        _receive(store, folder, 2 * wait_s + 5)


def post(
    store: Any, placement: dict[str, Any], records: list[dict[str, Any]], node_text: str | None
) -> None:
    """This rank's compact journal, its fingerprint if new, and (a node's first rank) the
    node's entry with its facts if their digest is new."""
    fingerprints: dict[str, dict[str, Any]] = {}
    compact = [_compact_record(record, fingerprints) for record in records]
    for digest, fingerprint in fingerprints.items():
        _send_if_new(store, "fingerprint", digest, json.dumps(fingerprint))
    rank = placement["rank"]
    store.set(f"{PREFIX}journal/{rank}", json.dumps({**placement, "records": compact}))
    if placement["local_rank"] == 0:
        store.set(f"{PREFIX}node/{placement['group_rank']}", _node_entry(store, node_text))
    store.add(POSTED, 1)


def _node_entry(store: Any, node_text: str | None) -> str:
    try:
        document = json.loads(node_text or "{}")
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    probes = document.pop("probes", [])
    digest = document.get("digest") or digest_of(probes)
    _send_if_new(store, "node_facts", digest, json.dumps(probes))
    return json.dumps({**document, "digest": digest})


def _send_if_new(store: Any, kind: str, digest: str, text: str) -> None:
    key = f"{PREFIX}{kind}/{digest}"
    if int(store.add(f"{PREFIX}seen/{kind}/{digest}", 1)) == 1:
        store.set(key, text)


def digest_of(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def split_identity(identity: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the rank's own fields, its fingerprint)."""
    own = {k: v for k, v in identity.items() if k in OWN_FIELDS}
    return own, {k: v for k, v in identity.items() if k not in OWN_FIELDS}


def _compact_identity(identity: Any, fingerprints: dict[str, dict[str, Any]]) -> Any:
    if not isinstance(identity, dict) or "fingerprint" in identity:
        return identity
    own, fingerprint = split_identity(identity)
    digest = digest_of(fingerprint)
    fingerprints[digest] = fingerprint
    return {**own, "fingerprint": digest}


def _compact_record(record: dict[str, Any], fingerprints: dict[str, dict[str, Any]]) -> Any:
    data = record.get("data")
    if record.get("stage") != "identity" or not isinstance(data, dict):
        return record
    data = dict(data)
    if "identity" in data:
        data["identity"] = _compact_identity(data["identity"], fingerprints)
    if isinstance(data.get("identities"), list):
        data["identities"] = [_compact_identity(i, fingerprints) for i in data["identities"]]
    return {**record, "data": data}


def connect_store(torch: Any, wait_s: float) -> Any:
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


def gather(store: Any, placement: dict[str, Any], folder: Path, wait_s: float) -> None:
    """Rank 0: waits (bounded) for every rank's post, then writes cluster.json."""
    world, nodes = placement["world_size"], placement["group_world_size"]
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and int(store.add(POSTED, 0)) < world:
        time.sleep(POLL_S)
    journals = _loaded(_present(store, [f"{PREFIX}journal/{r}" for r in range(world)]))
    node_entries = _loaded(_present(store, [f"{PREFIX}node/{n}" for n in range(nodes)]))
    rank_digests = _digests_in(journals.values())
    node_digests = {e.get("digest") for e in node_entries.values() if isinstance(e, dict)}
    document = {
        "world_size": world,
        "group_world_size": nodes,
        "journals": journals,
        "nodes": node_entries,
        "fingerprints": _loaded(
            _present(store, [f"{PREFIX}fingerprint/{d}" for d in rank_digests])
        ),
        "node_facts": _loaded(
            _present(store, [f"{PREFIX}node_facts/{d}" for d in sorted(filter(None, node_digests))])
        ),
    }
    _write_atomically(folder / "cluster.json", json.dumps(document))


def _digests_in(journals: Any) -> list[str]:
    found: dict[str, None] = {}
    for journal in journals:
        for record in journal.get("records") or [] if isinstance(journal, dict) else []:
            data = record.get("data") if isinstance(record, dict) else None
            if not isinstance(data, dict):
                continue
            for identity in [data.get("identity"), *(data.get("identities") or [])]:
                if isinstance(identity, dict) and isinstance(identity.get("fingerprint"), str):
                    found[identity["fingerprint"]] = None
    return list(found)


def _loaded(found: dict[str, str]) -> dict[str, Any]:
    loaded = {}
    for key, value in found.items():
        with contextlib.suppress(ValueError):
            loaded[key.rsplit("/", 1)[1]] = json.loads(value)
    return loaded


def _present(store: Any, keys: list[str]) -> dict[str, str]:
    """The values of those keys that exist: in batches where all do, else one by one."""
    found: dict[str, str] = {}
    for start in range(0, len(keys), BATCH):
        batch = keys[start : start + BATCH]
        with contextlib.suppress(Exception):
            if store.check(batch):
                found.update(zip(batch, [v.decode() for v in store.multi_get(batch)], strict=True))
                continue
        for key in batch:
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
