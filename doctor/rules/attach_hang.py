"""The attached job's verdict in the codes the job and the trace use for the same causes:
DDP302 (hung in a collective), DDP304 (mismatched collectives), DDP307 (a rank is dead). These
codes are not facts rules here (they belong to other modules), so judge.py calls
`attach_hang_findings` after the facts rules; attach's own codes are in rules/attach.py."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.attach.verdict import (
    DEAD,
    HUNG,
    MISMATCHED,
    RankView,
    Verdict,
    label,
    verdict_of,
)
from ddp_doctor.facts.attach import AttachFacts
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Finding, Location, Remediation
from ddp_doctor.registry import Hit, spec_for
from ddp_doctor.rules.jobreading import rank_list

SEEN = "attached"
HANG_FIX = Remediation(
    "Make every rank reach the same collectives in the same order: the rank named is at the "
    "line shown instead (a rank guard, a dataset or file it waits for, fewer batches). Where "
    "no rank of this host is elsewhere, attach on the other nodes and merge the reports with "
    "`ddp-doctor diagnose node0.json node1.json`."
)
MISMATCH_FIX = Remediation(
    "Call the same collectives in the same order on every rank; run with "
    "TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch name the first mismatch itself."
)
DEAD_FIX = Remediation(
    "Read the dead rank's own output for its error (a zombie's exit status is held by its "
    "launcher); the others wait for it until the process group's timeout."
)


def attach_hang_findings(facts: FactSet) -> list[Finding]:
    attached: AttachFacts | None = facts.attach
    if attached is None:
        return []
    return [spec_for(code).finding(hit) for code, hit in verdict_hits(verdict_of(attached))]


def verdict_hits(verdict: Verdict) -> Iterator[tuple[str, Hit]]:
    if verdict.kind == HUNG:
        yield "DDP302", _hang_hit(verdict)
    elif verdict.kind == MISMATCHED:
        yield "DDP304", _mismatch_hit(verdict)
    elif verdict.kind == DEAD:
        yield "DDP307", _dead_hit(verdict)


def _hang_hit(verdict: Verdict) -> Hit:
    waiting = [verdict.view(k) for k in verdict.waiting]
    first = waiting[0].last
    at = f" at {first.site}" if first.site else ""
    how = " (DDP's gradient all_reduce, in backward)" if first.kind == "backward" else ""
    group = "the default group" if verdict.group == "0" else f"process group {verdict.group}"
    number = (
        f", collective {verdict.seq} of {group} (flight recorder)"
        if verdict.seq is not None
        else f" of {group} (sequence number not known without the flight recorder)"
    )
    if first.kind == "init":
        number = " (the rendezvous: it waits until every rank of the world has joined)"
    parts = [
        f"{verdict.op}{how}{number}: {_ranks(verdict.waiting)} {_verb(verdict.waiting)} in it{at}"
    ]
    for key in verdict.missing:
        view = verdict.view(key)
        parts.append(f"{view.label()} never reached it: it {view.last.describe()}")
    if verdict.absent:
        parts.append(
            f"{_ranks(verdict.absent)} of the world are not on the hosts attached: attach on "
            "their nodes too"
        )
    if not verdict.missing and not verdict.absent:
        parts.append("every rank waits in it: a peer process or the network is gone")
    site = _first_site(verdict, verdict.missing) or first.site
    return Hit(
        "; ".join(parts),
        {
            "seen": SEEN,
            "collective": verdict.op,
            "group": verdict.group,
            "seq": verdict.seq,
            "waiting": list(verdict.waiting),
            "waiting_at": {label(k): _site_text(verdict.view(k)) for k in verdict.waiting},
            "missing": {label(k): verdict.view(k).last.describe() for k in verdict.missing},
            "absent": list(verdict.absent),
        },
        fix=HANG_FIX,
        location=Location(site.path, site.line) if site else None,
    )


def _mismatch_hit(verdict: Verdict) -> Hit:
    mismatch = verdict.mismatch
    assert mismatch is not None
    parts = [
        f"{label(key)} waits in {call.op}" + (f" at {call.where}" if call.where else "")
        for key, call in mismatch.calls.items()
    ]
    site = _first_site(verdict, tuple(mismatch.calls))
    return Hit(
        "ranks wait in different collectives at the same point: " + "; ".join(parts),
        {
            "seen": SEEN,
            "calls": {label(k): c.op for k, c in mismatch.calls.items()},
            "where": {label(k): c.where for k, c in mismatch.calls.items()},
        },
        fix=MISMATCH_FIX,
        location=Location(site.path, site.line) if site else None,
    )


def _dead_hit(verdict: Verdict) -> Hit:
    dead = [verdict.view(k) for k in verdict.missing]
    parts = [f"{v.label()} (pid {v.rank.pid}) is {_death(v)}" for v in dead]
    if verdict.gone:
        parts.append(
            f"{_ranks(verdict.gone)} of the world {'is' if len(verdict.gone) == 1 else 'are'} "
            "not running: the job runs on this host alone and no process of it has that rank "
            "(it ended and was reaped, or never started)"
        )
    for key in verdict.waiting:
        view = verdict.view(key)
        parts.append(f"{view.label()} {view.last.describe()}")
    site = _first_site(verdict, verdict.waiting)
    return Hit(
        "; ".join(parts),
        {
            "seen": SEEN,
            "dead": [label(k) for k in (*verdict.missing, *verdict.gone)],
            "pids": {label(v.key): v.rank.pid for v in dead},
            "alive": list(verdict.waiting),
            "where": {label(k): verdict.view(k).last.describe() for k in verdict.waiting},
        },
        fix=DEAD_FIX,
        location=Location(site.path, site.line) if site else None,
    )


def _death(view: RankView) -> str:
    if view.state != "zombie":
        return f"{view.state} (it ended while attached)"
    inferred = view.rank.rank_from not in ("RANK", "SLURM_PROCID", "spawn order")
    how = f"; its rank is {view.rank.rank_from}" if inferred and view.key >= 0 else ""
    return f"a zombie: it exited and its launcher has not reaped it{how}"


def _site_text(view: RankView) -> str | None:
    return str(view.last.site) if view.last.site else None


def _first_site(verdict: Verdict, keys: tuple[int, ...]):  # type: ignore[no-untyped-def]
    for key in keys:
        site = verdict.view(key).last.site
        if site is not None:
            return site
    return None


def _verb(keys: tuple[int, ...]) -> str:
    return "waits" if len(keys) == 1 else "wait"


def _ranks(keys: tuple[int, ...]) -> str:
    known = [k for k in keys if k >= 0]
    unknown = [label(k) for k in keys if k < 0]
    words = [f"rank{'s' if len(known) > 1 else ''} {rank_list(known)}"] if known else []
    return ", ".join(words + unknown)
