"""A flight-recorder dump of one rank, read from a pickle or from JSON, as plain records.

torch writes one dump per rank (TORCH_FR_DUMP_TEMP_FILE, formerly
TORCH_NCCL_DEBUG_INFO_TEMP_FILE, + the rank: "nccl_trace_rank_3"; or what
torch._C._distributed_c10d._dump_fr_trace / _dump_fr_trace_json return). The content names no
rank, so the rank is the number at the end of the file name, as torch's own fr_trace tool
reads it. Keys as torch 2.13 writes them (version "2.10"): entries[] with collective_seq_id,
p2p_seq_id, profiling_name ("nccl:all_reduce", "gloo:broadcast"), process_group [name, desc],
input_sizes, input_dtypes, output_sizes, output_dtypes, state, retired, is_p2p, timeout_ms,
frames[] (pickle only); pg_config {name: {desc, ranks}}; pg_status. Older dumps call the
sequence id "seq_id".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.facts.collectives import CollectiveCall
from ddp_doctor.flightrec.safe_pickle import BadPickle, UnsafePickle, load_plain
from ddp_doctor.inputs import TooLarge, read_capped
from ddp_doctor.readings.flight_recorder_entries import entry_call

# A rank's dump holds TORCH_FR_BUFFER_SIZE entries (2000 by default, a few KiB each with
# stack traces); 32 MiB keeps the decoded objects of one dump within the doctor's memory bound.
MAX_DUMP_BYTES = 32 << 20
_RANK_SUFFIX = re.compile(r"(?<!\d)(\d{1,9})$")  # a rank, not a 5000-digit number
MAX_RANK = 1 << 24  # more ranks than any job has; a larger number names none
MAX_RANKS_TEXT = 1 << 20  # pg_config's "ranks" as text: a million characters is 100,000 ranks


class DumpError(ValueError):
    """A file that should be a dump and cannot be read as one; the message says why."""


@dataclass(frozen=True)
class RankDump:
    path: str
    rank: int | None
    version: str
    entries: tuple[CollectiveCall, ...]  # read by the one entry parser
    group_ranks: Mapping[str, tuple[int, ...]]  # process group name -> its global ranks


def read_dump(path: Path) -> RankDump:
    try:
        data = read_capped(path, MAX_DUMP_BYTES)
    except TooLarge as error:
        raise DumpError(f"{error} for a dump") from None
    except OSError as error:
        raise DumpError(f"cannot read it: {error.strerror or error}") from None
    document = _decode(data)
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        raise DumpError("not a flight-recorder dump: no list of entries")
    entries = tuple(entry_call(raw) for raw in document["entries"] if isinstance(raw, dict))
    return RankDump(
        path=str(path),
        rank=_rank_of(path, document),
        version=str(document.get("version", "")),
        entries=entries,
        group_ranks=_group_ranks(document.get("pg_config")),
    )


def _decode(data: bytes) -> object:
    if data[:1] == b"\x80":
        try:
            return load_plain(data)
        except UnsafePickle as error:
            raise DumpError(f"refused: {error}") from None
        except BadPickle as error:
            raise DumpError(str(error)) from None
    try:
        return json.loads(data)
    except RecursionError:
        raise DumpError("not a flight-recorder dump: nested too deeply") from None
    except ValueError as error:  # JSONDecodeError, bad UTF-8, an integer past Python's limit
        raise DumpError(f"not a complete JSON dump ({str(error)[:200]})") from None


def _rank_of(path: Path, document: Mapping[str, object]) -> int | None:
    rank = document.get("rank")
    if isinstance(rank, int) and not isinstance(rank, bool):
        return rank if 0 <= rank < MAX_RANK else None
    stem = path.name.split(".")[0]
    found = _RANK_SUFFIX.search(stem)
    return int(found.group(1)) if found else None


def _group_ranks(config: object) -> dict[str, tuple[int, ...]]:
    """pg_config's ranks, which torch writes as a string ("[0, 1]") or a list."""
    groups: dict[str, tuple[int, ...]] = {}
    if not isinstance(config, dict):
        return groups
    for name, group in config.items():
        ranks = group.get("ranks") if isinstance(group, dict) else None
        if isinstance(ranks, str):
            ranks = [int(n) for n in re.findall(r"-?\d{1,9}", ranks[:MAX_RANKS_TEXT])]
        if isinstance(ranks, (list, tuple)) and ranks:
            groups[str(name)] = tuple(int(r) for r in ranks if isinstance(r, int))
    return groups
