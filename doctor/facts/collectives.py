"""One collective as one rank recorded it: the one record type of the collective analysis
(doctor/readings/collective_progress.py), whether it came from trace's wrappers, from torch's
flight recorder in a traced rank, or from a flight-recorder dump given to `logs`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

COMPLETED, PENDING = "completed", "pending"
TRACE, FLIGHT_RECORDER = "trace", "flight recorder"


@dataclass(frozen=True)
class CollectiveCall:
    # The collective's sequence number in its process group, as the flight recorder counts it
    # (collective_seq_id); trace's wrappers count the script's own calls when it is off.
    seq: int
    op: str  # the torch.distributed name: all_reduce, barrier, all_gather_into_tensor ...
    group: str = "0"  # the process group's name; "0" is the default group
    shapes: tuple[tuple[int, ...], ...] = ()  # the input's (flight recorder: input_sizes)
    dtypes: tuple[str, ...] = ()  # torch's spelling: float32, int64
    state: str = COMPLETED  # completed or pending (entered, not finished)
    where: str | None = None  # "path:line" of the call, where the record knows it
    source: str = TRACE  # trace (the monitor's wrappers) or flight recorder
    group_desc: str = ""  # "default_pg", "dp_group" ... where the flight recorder names it
    backend: str = ""  # nccl, gloo, where the flight recorder names it
    output_shapes: tuple[tuple[int, ...], ...] = ()
    output_dtypes: tuple[str, ...] = ()
    point_to_point: bool = False
    timeout_ms: int | None = None

    def describe(self) -> str:
        shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in self.shapes)
        types = ", ".join(dict.fromkeys(self.dtypes))
        detail = f" [{shapes}] {types}".rstrip() if shapes else ""
        return f"{self.op}{detail}"


@dataclass(frozen=True)
class RankCollectives:
    """What one rank recorded, in order, and the process groups it knows the members of."""

    rank: int
    calls: tuple[CollectiveCall, ...] = ()
    group_ranks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
