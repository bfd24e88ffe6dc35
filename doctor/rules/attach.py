"""DDP701-DDP704: what only `attach` sees of a running job. Facts rules over AttachFacts, so
`diagnose` judges a saved attach report again; the verdict is doctor/attach/verdict.py's."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.attach.places import Place
from ddp_doctor.attach.rate import step_rate
from ddp_doctor.attach.verdict import (
    PROGRESSING,
    STUCK,
    WAITING_FOR_BUSY,
    RankView,
    label,
    verdict_of,
    views_of,
)
from ddp_doctor.facts.attach import AttachedRank, AttachFacts, PtraceAccess
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Location, Remediation, Severity
from ddp_doctor.registry import Hit, rule

WORKER_STATES = {
    "zombie": "dead, not reaped: torch raises 'DataLoader worker (pid N) is killed' in the rank "
    "once its main thread runs Python again, out of the collective or call it is in",
    "stopped": "stopped by a signal: it makes no batch until it is continued",
}
PTRACE_FIX = Remediation(
    "Let the doctor read the ranks' memory: run `ddp-doctor attach` as the job's user or as "
    "root with CAP_SYS_PTRACE; in a container add the SYS_PTRACE capability."
)


@rule("DDP701", PTRACE_FIX)
def stacks_unreadable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: py-spy could not read the Python stacks of some ranks: the kernel refused
    ptrace (another user's process, yama's ptrace_scope, a container without SYS_PTRACE), or
    py-spy is not installed beside the doctor.
    Why it matters: without stacks the report cannot say which collective a rank waits in nor
    at which line; it still gives what /proc tells (state, wait channel, CPU time).
    Example: the job runs as user `train` and `ddp-doctor attach` as another user; a pod
    without `securityContext.capabilities.add: [SYS_PTRACE]`.
    Fix: run attach as the job's user (`sudo -u USER ddp-doctor attach PID`) or as root with
    CAP_SYS_PTRACE (`--cap-add SYS_PTRACE` for docker); lower ptrace_scope to 0 or 1 where yama
    forbids it (`sudo sysctl kernel.yama.ptrace_scope=1`; 3 needs a reboot).
    """
    attached: AttachFacts | None = facts.attach
    if attached is None:
        return
    blind = [r for r in attached.ranks if r.samples and all(s.stacks_error for s in r.samples)]
    if not blind:
        return
    error = blind[0].samples[-1].stacks_error or ""
    seen = "; ".join(_proc_view(r) for r in blind)
    everyone = len(blind) == len(attached.ranks)
    quiet = everyone and all(v.quiet for v in views_of(attached))
    still = (
        f"; no rank's main thread ran or woke in {_span(attached)}: likely a hang" if quiet else ""
    )
    yield Hit(
        f"no stacks of {len(blind)} of {len(attached.ranks)} ranks ({error}); /proc shows: "
        f"{seen}{still}",
        {
            "ranks": [r.rank for r in blind],
            "py_spy": attached.py_spy or "missing",
            "error": error,
            "users": sorted({r.user for r in blind}),
        },
        fix=_access_fix(attached, blind),
        severity=Severity.ERROR if everyone else None,  # nothing of the job could be judged
    )


def _proc_view(rank: AttachedRank) -> str:
    first, last = rank.samples[0], rank.samples[-1]
    cpu = ""
    if first.cpu_s is not None and last.cpu_s is not None:
        cpu = f", CPU {last.cpu_s:.1f} s (+{last.cpu_s - first.cpu_s:.2f} s while sampled)"
    wchan = f" in {last.wchan}" if last.wchan else ""
    return f"{_name(rank)} {last.state}{wchan}{cpu}"


def _access_fix(attached: AttachFacts, blind: list[AttachedRank]) -> Remediation:
    if attached.py_spy is None:
        return Remediation(
            "Install py-spy where ddp-doctor runs (it is a dependency: reinstall ddp-doctor)",
            ("python3 -m pip install 'py-spy==0.4.3'",),
        )
    access = attached.access or PtraceAccess(doctor_uid=-1)
    users = sorted({r.user for r in blind if r.user})
    if access.yama_scope is not None and access.yama_scope >= 1 and access.doctor_uid != 0:
        scope = access.yama_scope
        text = (
            f"yama's ptrace_scope is {scope}: only root may attach to another process"
            + (" and 3 cannot be lowered without a reboot" if scope == 3 else "")
            + "; run the doctor with sudo, or lower the scope"
        )
        return Remediation(
            text, ("sudo ddp-doctor attach", "sudo sysctl kernel.yama.ptrace_scope=0")
        )
    if access.doctor_uid != 0 and users:
        return Remediation(
            f"The ranks run as {', '.join(users)}: run the doctor as that user, or as root",
            (f"sudo -u {users[0]} ddp-doctor attach",),
        )
    if not access.cap_sys_ptrace:
        others = [u for u in users if u != "root"]
        return Remediation(
            "The doctor runs without CAP_SYS_PTRACE (a container drops it by default): add it "
            "to the container (docker run --cap-add SYS_PTRACE; Kubernetes "
            "securityContext.capabilities.add: [SYS_PTRACE]), run attach from the host"
            + (f", or run it as the ranks' user {others[0]}" if others else ""),
            (f"sudo -u {others[0]} ddp-doctor attach",) if others else (),
        )
    return PTRACE_FIX


@rule(
    "DDP702",
    Remediation(
        "Look at the line each rank is at: a dataset or file it waits for, a lock, a network "
        "mount (uninterruptible sleep is the kernel waiting for I/O); the job will not continue "
        "by itself."
    ),
)
def stuck_outside_collectives(facts: FactSet) -> Iterator[Hit]:
    """What it finds: between the samples no rank's main thread ran or woke, its stack stayed
    the same, and none of them waits in a collective.
    Why it matters: the job is stuck before its next collective on every rank, in its own code,
    its data loading or the kernel, and no NCCL or gloo timeout will ever end it.
    Example: every rank waits for a file that a previous job should have written; an NFS
    mount that stopped answering (ranks in uninterruptible sleep).
    Fix: follow the line each rank is at; unblock what it waits for.
    """
    attached: AttachFacts | None = facts.attach
    if attached is None:
        return
    verdict = verdict_of(attached)
    if verdict.kind != STUCK:
        return
    parts = [f"{v.label()} {v.last.describe()}" for v in verdict.views]
    site = next((v.last.site for v in verdict.views if v.last.site), None)
    yield Hit(
        f"no rank moved in {_span(attached)} and none waits in a collective: " + "; ".join(parts),
        {"ranks": {label(v.key): v.last.describe() for v in verdict.views}},
        location=Location(site.path, site.line) if site else None,
    )


@rule(
    "DDP703",
    Remediation(
        "A DataLoader worker died (often the kernel's out-of-memory killer, see `dmesg`): lower "
        "num_workers or the workers' memory, and restart the job; set timeout= on the "
        "DataLoader so a dead worker raises instead of hanging."
    ),
)
def dataloader_worker_dead(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a child process of a rank (a DataLoader worker) is a zombie or stopped.
    Why it matters: the rank waits for batches that will never come, and the other ranks wait
    for that rank in their next collective.
    Example: the out-of-memory killer took a worker; a worker stopped by a signal.
    Fix: find why the worker died (dmesg), lower num_workers or memory, restart.
    """
    attached: AttachFacts | None = facts.attach
    if attached is None:
        return
    for view in views_of(attached):
        last = view.rank.samples[-1].children
        bad = [c for c in last if c.state in ("zombie", "stopped")]
        if bad:
            pids = ", ".join(f"{c.pid} ({WORKER_STATES[c.state]})" for c in bad)
            yield Hit(
                f"{view.label()}'s worker process {pids}; the rank {view.last.describe()}",
                {
                    "rank": label(view.key),
                    "workers": [c.pid for c in bad],
                    "states": {str(c.pid): c.state for c in bad},
                },
                location=_location(view),
            )


@rule(
    "DDP704",
    Remediation(
        "Find what the named rank does outside the collectives (its line is shown) and even it "
        "out: uneven data, work only rank 0 does (evaluation, checkpoints, logging), a slower "
        "GPU or a busier CPU; move rank-only work to all ranks or after the loop."
    ),
)
def ranks_wait_for_one(facts: FactSet) -> Iterator[Hit]:
    """What it finds: in most samples (with two, in both) the other ranks waited in a
    collective while one rank was outside the collectives, working or sleeping.
    Why it matters: the whole job runs at that rank's pace; if it never comes, this becomes a
    hang at the collective timeout.
    Example: rank 0 writes a checkpoint while the others wait in the next all_reduce; one rank
    reads its data from a slow disk.
    Fix: make the work even across ranks, or move rank-only work out of the loop.
    """
    attached: AttachFacts | None = facts.attach
    if attached is None:
        return
    verdict = verdict_of(attached)
    if verdict.kind not in (WAITING_FOR_BUSY, PROGRESSING) or not verdict.busy:
        return
    others = [v for v in verdict.views if v.key not in verdict.busy]
    waiting = {v.key: v.mostly(waiting=True) or v.last for v in others}
    verb = "waits" if len(others) == 1 else "wait"
    first = waiting[others[0].key].op if others else None
    waits = f"{verb} in {first or 'a collective'}" if others else verb
    samples = "every sample" if verdict.kind == WAITING_FOR_BUSY else "most samples"
    for key in verdict.busy:
        view = verdict.view(key)
        busy_at = view.mostly(waiting=False) or view.last
        yield Hit(
            f"{', '.join(v.label() for v in others)} {waits} at {samples} "
            f"while {view.label()} {busy_at.describe()}",
            {
                "rank": label(key),
                "verdict": verdict.kind,
                "waiting_at": {
                    label(k): str(place.site) if place.site else None
                    for k, place in waiting.items()
                },
            },
            location=_location(view, busy_at),
        )


@rule(
    "DDP706",
    Remediation(
        "Nothing to fix: the job progresses. If it is slower than it should be, compare the "
        "step rate with a healthy run's and look for a straggler (`--samples 4`)."
    ),
)
def job_progressing(facts: FactSet) -> Iterator[Hit]:
    """What it finds: between the samples the ranks moved (their stacks changed, or they ran)
    and none is stuck in a collective or outside one: the job progresses. Where a step counter
    of the training loop is visible (an integer local of the main thread's own frames named
    step, iteration, i, batch_idx ..., read with py-spy's --locals), it rose between the first
    and the last sample, and its rise over the time between them is the step rate. Where none
    is, a flight-recorder dump written during this attach (asked for through the job's own
    TORCH_NCCL_DEBUG_INFO_PIPE_FILE, or gathered by its debug server) gives the pace of the
    collectives instead: so many in so many seconds by its last entries' sequence numbers and
    creation times.
    Why it matters: "hung, or just slow?" is the first question about a quiet job; this is the
    answer "slow, not hung", with how fast where that is visible. The report says why a rate is
    absent (a loop at a script's top level has no locals py-spy can read).
    Example: a 2-rank DDP job whose `train()` loops `for step, batch in enumerate(loader)`:
    "the job progresses: 6.1 steps/s (rank 0's `train:step` rose 12 in 2 s)".
    Fix: nothing; to find why it is slow, attach with more samples (`--samples 4`), which
    names a straggler (DDP704).
    """
    attached: AttachFacts | None = facts.attach
    if attached is None:
        return
    verdict = verdict_of(attached)
    if verdict.kind != PROGRESSING or any(len(v.rank.samples) < 2 for v in verdict.views):
        return  # one sample shows where the ranks are, not whether they move
    rate = step_rate(
        [(v.key, v.rank.samples) for v in verdict.views],
        [(v.key, v.rank.flight_recorder_pace) for v in verdict.views],
    )
    yield Hit(
        f"the job progresses: {rate.describe()}",
        {
            "steps_per_s": rate.per_s,
            "collectives_per_s": rate.collectives_per_s,
            "rank": rate.rank,
            "counter": rate.counter or None,
            "rose": rate.rose,
            "span_s": rate.span_s,
            "why": rate.why or None,
        },
        location=Location(rate.where) if rate.where else None,
    )


def _location(view: RankView, place: Place | None = None) -> Location | None:
    site = (place or view.last).site
    return Location(site.path, site.line) if site else None


def _name(rank: AttachedRank) -> str:
    who = f"rank {rank.rank}" if rank.rank is not None else "rank ?"
    return f"{who} (pid {rank.pid}, user {rank.user or '?'})"


def _span(attached: AttachFacts) -> str:
    return f"{attached.interval_s * max(1, attached.sample_count - 1):g} s"
