"""The comparison of flight records as findings: DDP302 for a collective some ranks never
reached (or none finished), DDP304 for ranks that disagree at one sequence id, DDP511 for a
dump that could not be read."""

from __future__ import annotations

from ddp_doctor.flightrec.compare import Comparison, Divergence, Side
from ddp_doctor.flightrec.dumps import Entry
from ddp_doctor.model import Finding, Location, Remediation
from ddp_doctor.registry import Hit, spec_for

NEVER_REACHED_FIX = Remediation(
    "The ranks that never reached this collective stopped earlier in the code: look at what "
    "follows their last collective (its caller is in the evidence when the dump has stack "
    "frames). Usual causes: a collective under `if rank == 0:`, a loop that runs a different "
    "number of times per rank (uneven data without drop_last), an exception caught on one "
    "rank, one rank stuck in data loading or I/O. `ddp-doctor check` finds collectives under "
    "rank guards.",
    ("ddp-doctor check train.py",),
)
MISMATCH_FIX = Remediation(
    "Every rank must issue the same collectives in the same order, with the same shapes and "
    "dtypes. The callers in the evidence show where each side issued its collective: make the "
    "control flow before them the same on every rank (no collective under a rank guard, no "
    "rank-dependent tensor shapes).",
    ("ddp-doctor check train.py",),
)
STUCK_FIX = Remediation(
    "Every rank entered the same collective and none finished it, so the ranks agree and the "
    "collective itself stalled: the network between the ranks (NCCL_SOCKET_IFNAME, a "
    "firewall), a GPU or link fault (NCCL_P2P_DISABLE=1 to bisect), or a rank without a dump "
    "that crashed inside it.",
    ("NCCL_DEBUG=WARN torchrun --nproc-per-node=N train.py",),
)


def findings_of(comparison: Comparison) -> tuple[list[Finding], list[Finding]]:
    """(causes, symptoms): where ranks diverged names a cause; a collective every rank entered
    and none finished is what a cause elsewhere (a crash, the network) left behind."""
    causes, symptoms = [], []
    for divergence in comparison.divergences:
        target = symptoms if divergence.kind == "not-completed" else causes
        target.append(_finding(divergence, comparison))
    return causes, symptoms


def unreadable_findings(unreadable: dict[str, str]) -> list[Finding]:
    return [_unreadable(path, why) for path, why in unreadable.items()]


def _finding(divergence: Divergence, comparison: Comparison) -> Finding:
    missing = comparison.missing_ranks.get(divergence.group, [])
    group = divergence.group_desc or f"group {divergence.group}"
    where = f"process group {group}, collective #{divergence.seq}"
    evidence: dict[str, object] = {
        "source": "flight recorder",
        "process_group": divergence.group,
        "group_desc": divergence.group_desc,
        "seq": divergence.seq,
        "sides": [_side_facts(side) for side in divergence.sides],
    }
    if missing:
        evidence["ranks_without_dump"] = missing
    no_dump = f"; {_who(missing)} left no dump (a rank that crashed writes none)"
    tail = no_dump if missing else ""
    if divergence.kind == "never-reached":
        entered = [s for s in divergence.sides if s.entry is not None]
        behind = [s for s in divergence.sides if s.entry is None]
        evidence |= {
            "entered_ranks": sorted(r for s in entered for r in s.ranks),
            "never_reached_ranks": sorted(r for s in behind for r in s.ranks),
        }
        if entered and entered[0].entry:
            evidence |= _entry_facts(entered[0].entry)
        message = (
            f"{where} ({_describe_sides(entered)}) was never reached by "
            f"{_who(evidence['never_reached_ranks'])}"  # type: ignore[arg-type]
            f" ({_describe_behind(behind)}){tail}"
        )
        return _make("DDP302", message, NEVER_REACHED_FIX, evidence)
    if divergence.kind == "mismatch":
        evidence["differs"] = list(divergence.differs)
        message = (
            f"{where}: ranks disagree on {' and '.join(divergence.differs)}: "
            f"{_describe_sides(divergence.sides)}{tail}"
        )
        return _make("DDP304", message, MISMATCH_FIX, evidence)
    first = divergence.sides[0].entry
    if first is not None:
        evidence |= _entry_facts(first)
    if len(comparison.ranks) == 1:
        message = (
            f"{where}: {_describe_sides(divergence.sides)} was not finished when this, the only "
            "dump, was taken; the other ranks' dumps would show whether they entered it"
        )
        return _make("DDP302", message, STUCK_FIX, evidence)
    message = (
        f"{where}: every rank with a dump entered it ({_describe_sides(divergence.sides)}) "
        f"and none had finished it when it dumped{tail}"
    )
    return _make("DDP302", message, STUCK_FIX, evidence)


def _unreadable(path: str, why: str) -> Finding:
    return _make(
        "DDP511",
        f"the flight-recorder dump {path} could not be read: {why}",
        None,  # the code's registered fix
        {"source": "flight recorder", "path": path, "why": why},
        location=Location(path),
    )


def _make(
    code: str,
    message: str,
    fix: Remediation | None,
    evidence: dict[str, object],
    location: Location | None = None,
) -> Finding:
    """Through the registry's one builder: a fix of None is the code's registered fix."""
    return spec_for(code).finding(Hit(message, evidence, fix=fix, location=location))


def _entry_facts(entry: Entry) -> dict[str, object]:
    return {
        "op": entry.op,
        "backend": entry.backend,
        "input_sizes": [list(s) for s in entry.input_sizes],
        "input_dtypes": list(entry.input_dtypes),
        **({"caller": entry.caller} if entry.caller else {}),
    }


def _side_facts(side: Side) -> dict[str, object]:
    facts: dict[str, object] = {"ranks": list(side.ranks)}
    if side.entry is not None:
        facts |= _entry_facts(side.entry) | {"completed": side.entry.completed}
    else:
        facts["reached"] = False
        if side.last is not None:
            facts["last_seq"] = side.last.seq
            facts["last_op"] = side.last.op
            if side.last.caller:
                facts["last_caller"] = side.last.caller
    return facts


def _describe_sides(sides: tuple[Side, ...] | list[Side]) -> str:
    return "; ".join(
        f"{_who(side.ranks)}: {_describe_entry(side.entry)}"
        for side in sides
        if side.entry is not None
    )


def _describe_behind(behind: list[Side]) -> str:
    parts = []
    for side in behind:
        if side.last is None:
            parts.append(f"{_who(side.ranks)} recorded no collective in this group")
        else:
            parts.append(f"{_who(side.ranks)} last ran #{side.last.seq} "
                         f"{_describe_entry(side.last)}")  # fmt: skip
    return "; ".join(parts)


def _describe_entry(entry: Entry) -> str:
    sizes = ", ".join("x".join(str(n) for n in shape) or "scalar" for shape in entry.input_sizes)
    dtypes = "/".join(dict.fromkeys(entry.input_dtypes))
    text = entry.op + (f" [{sizes}]" if sizes else "") + (f" {dtypes}" if dtypes else "")
    return text + (f" at {entry.caller}" if entry.caller else "")


def _ranks(ranks: list[int] | tuple[int, ...]) -> str:
    return ",".join(str(r) for r in ranks)


def _who(ranks: list[int] | tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks(ranks)}"
