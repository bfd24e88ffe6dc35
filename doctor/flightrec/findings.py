"""The collective analysis of flight records as findings: DDP302 for the collective of a group
that some ranks never reached (or that none finished), DDP304 for ranks that disagree at one
sequence number, DDP511 for a dump that could not be read."""

from __future__ import annotations

from collections.abc import Sequence

from ddp_doctor.facts.collectives import COMPLETED, CollectiveCall
from ddp_doctor.model import Finding, Location, Remediation
from ddp_doctor.readings.collective_progress import (
    NOT_COMPLETED,
    PARTLY_COMPLETED,
    CollectiveProgress,
    GroupProgress,
    Mismatch,
    Stall,
    signature,
)
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


def findings_of(progress: CollectiveProgress) -> tuple[list[Finding], list[Finding]]:
    """(causes, symptoms): a group's first mismatch and a collective some ranks never reached
    name a cause; a collective every rank entered and none finished is what a cause elsewhere
    (a crash, the network) left behind."""
    causes, symptoms = [], []
    for group in progress.groups:
        if group.mismatches:
            causes.append(_mismatch(group.mismatches[0], group))
        if group.stall is not None and group.stall.kind != PARTLY_COMPLETED:
            stuck = group.stall.kind == NOT_COMPLETED
            finding = _stall(group.stall, group, len(progress.ranks))
            (symptoms if stuck else causes).append(finding)
    return causes, symptoms


def unreadable_findings(unreadable: dict[str, str]) -> list[Finding]:
    return [_unreadable(path, why) for path, why in unreadable.items()]


def _where(group: GroupProgress, seq: int) -> str:
    name = group.group_desc or f"group {group.group}"
    return f"process group {name}, collective #{seq}"


def _base_evidence(group: GroupProgress, seq: int) -> dict[str, object]:
    evidence: dict[str, object] = {
        "source": "flight recorder",
        "process_group": group.group,
        "group_desc": group.group_desc,
        "seq": seq,
    }
    if group.missing:
        evidence["ranks_without_dump"] = list(group.missing)
    return evidence


def _no_dump(group: GroupProgress) -> str:
    if not group.missing:
        return ""
    return f"; {_who(group.missing)} left no dump (a rank that crashed writes none)"


def _mismatch(mismatch: Mismatch, group: GroupProgress) -> Finding:
    sides = _sides_by_signature(mismatch.calls)
    evidence = _base_evidence(group, mismatch.seq)
    evidence["sides"] = [_call_side(ranks, call) for ranks, call in sides]
    evidence["differs"] = list(mismatch.differs)
    message = (
        f"{_where(group, mismatch.seq)}: ranks disagree on {' and '.join(mismatch.differs)}: "
        f"{_describe_sides(sides)}{_no_dump(group)}"
    )
    return _make("DDP304", message, MISMATCH_FIX, evidence)


def _stall(stall: Stall, group: GroupProgress, dumps: int) -> Finding:
    evidence = _base_evidence(group, stall.seq)
    at_point = {rank: stall.call for rank in (*stall.waiting, *stall.through)}
    at_point |= {r: p.at for r, p in stall.elsewhere.items() if p.at is not None}
    entered = _sides_by_signature(at_point)
    behind = _behind(stall)
    evidence["sides"] = [_call_side(ranks, call) for ranks, call in entered] + [
        _behind_side(ranks, last) for ranks, last in behind
    ]
    evidence |= _call_facts(stall.call)
    where = _where(group, stall.seq)
    if stall.kind == NOT_COMPLETED:
        if dumps == 1:
            message = (
                f"{where}: {_describe_sides(entered)} was not finished when this, the only "
                "dump, was taken; the other ranks' dumps would show whether they entered it"
            )
        else:
            message = (
                f"{where}: every rank with a dump entered it ({_describe_sides(entered)}) "
                f"and none had finished it when it dumped{_no_dump(group)}"
            )
        return _make("DDP302", message, STUCK_FIX, evidence)
    evidence["waiting_ranks"] = list(stall.waiting)
    evidence["entered_ranks"] = sorted(at_point)
    evidence["never_reached_ranks"] = sorted(stall.elsewhere)
    chosen = [(stall.waiting, stall.call)]
    message = (
        f"{where} ({_describe_sides(chosen)}) was never reached by "
        f"{_who(sorted(stall.elsewhere))} ({_describe_elsewhere(stall)}){_no_dump(group)}"
    )
    return _make("DDP302", message, NEVER_REACHED_FIX, evidence)


def _behind(stall: Stall) -> list[tuple[list[int], CollectiveCall | None]]:
    """Ranks elsewhere with no call of their own at the point, grouped by their last one."""
    by_last: dict[int, list[int]] = {}
    lasts: dict[int, CollectiveCall | None] = {}
    for rank, position in sorted(stall.elsewhere.items()):
        if position.at is None:
            key = position.last.seq if position.last else -1
            by_last.setdefault(key, []).append(rank)
            lasts.setdefault(key, position.last)
    return [(ranks, lasts[key]) for key, ranks in sorted(by_last.items())]


def _describe_elsewhere(stall: Stall) -> str:
    parts = []
    others = {r: p.at for r, p in stall.elsewhere.items() if p.at is not None}
    for ranks, call in _sides_by_signature(others):
        parts.append(f"{_who(ranks)} called {_describe(call)} there instead")
    for ranks, last in _behind(stall):
        if last is None:
            parts.append(f"{_who(ranks)} recorded no collective in this group")
        else:
            parts.append(f"{_who(ranks)} last ran #{last.seq} {_describe(last)}")
    return "; ".join(parts)


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


def _sides_by_signature(calls: dict[int, CollectiveCall]) -> list[tuple[list[int], CollectiveCall]]:
    sides: dict[tuple[object, ...], list[int]] = {}
    for rank, call in sorted(calls.items()):
        sides.setdefault(signature(call), []).append(rank)
    return [(ranks, calls[ranks[0]]) for ranks in sides.values()]


def _call_facts(call: CollectiveCall) -> dict[str, object]:
    return {
        "op": call.op,
        "backend": call.backend,
        "input_sizes": [list(s) for s in call.shapes],
        "input_dtypes": list(call.dtypes),
        **({"caller": call.where} if call.where else {}),
    }


def _call_side(ranks: Sequence[int], call: CollectiveCall) -> dict[str, object]:
    return {"ranks": list(ranks), **_call_facts(call), "completed": call.state == COMPLETED}


def _behind_side(ranks: Sequence[int], last: CollectiveCall | None) -> dict[str, object]:
    facts: dict[str, object] = {"ranks": list(ranks), "reached": False}
    if last is not None:
        facts |= {"last_seq": last.seq, "last_op": last.op}
        if last.where:
            facts["last_caller"] = last.where
    return facts


def _describe_sides(sides: Sequence[tuple[Sequence[int], CollectiveCall]]) -> str:
    return "; ".join(f"{_who(ranks)}: {_describe(call)}" for ranks, call in sides)


def _describe(call: CollectiveCall) -> str:
    sizes = ", ".join("x".join(str(n) for n in shape) or "scalar" for shape in call.shapes)
    dtypes = "/".join(dict.fromkeys(call.dtypes))
    text = call.op + (f" [{sizes}]" if sizes else "") + (f" {dtypes}" if dtypes else "")
    return text + (f" at {call.where}" if call.where else "")


def _who(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ",".join(str(r) for r in ranks)
