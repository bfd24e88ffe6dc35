"""Conclusions that need the whole log, drawn after the scan from the tallies and the hints.

One line rarely names the cause by itself: "Address already in use" means another job unless
the process that failed should never have hosted the store; a watchdog timeout is a hang
unless rank 0 was still tokenising; "Connection closed by peer" is a symptom unless no rank
reports an error of its own. Each rule here reads what the scan kept (a bounded number of hits
per code and of hints) and changes a finding's code, role, fix or message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ddp_doctor.logscan.aggregate import CodeTally, Hints, LogHit
from ddp_doctor.logscan.inference_outside import (
    an_http_clients_errors,
    sigterm_of_an_unknown_sender,
)
from ddp_doctor.logscan.pattern import Pattern, Role
from ddp_doctor.logscan.patterns_hints import (
    BARRIER_COMPLETED,
    DATAPARALLEL,
    NON_SCALAR_BACKWARD,
    RANK0_WORK,
    SAME_LOCAL_RANK_ARGUMENT,
    SHM_NOT_WRITABLE,
)
from ddp_doctor.logscan.patterns_ranks import NCCL_REMOTE_ERROR
from ddp_doctor.logscan.patterns_training import DATAPARALLEL_DEVICE_FIX
from ddp_doctor.model import Remediation, Severity
from ddp_doctor.registry import spec_for

Tallies = dict[str, CodeTally]
ROOT_CAUSE_PRIORITY = 3
WAITS = ("DDP302", "DDP202", "DDP231", "DDP232")  # what ranks see while another is busy
STORE_UNUSABLE = ("DDP201", "DDP203", "DDP230", "DDP233")  # no store to connect to at all
_NETWORK_WORDS = ("NET/", "socket", "Socket", "Connect", "completion", "ibv_", "Net :")

SAME_RANK_PATTERN = Pattern(
    "DDP233",
    "same-rank-on-every-process",
    (),
    "a process other than rank 0 tried to host the rendezvous store[ on port {port}] and "
    "found it taken (EADDRINUSE): the processes were given the same rank ({why})",
)
RANK0_WORK_PATTERN = Pattern(
    "DDP232",
    "rank0-work-outlasts-timeout",
    (),
    "rank 0 was still busy[ with '{work}'][ ({elapsed} elapsed)] when the other ranks' "
    "[{timeout_ms} ms ]timeout ran out while they waited for it (line {waited_line})",
)
EARLY_EXIT_FIX = Remediation(
    "Find the rank that left: if no rank crashed, one ended its loop early. Give every rank "
    "the same number of steps (DistributedSampler with drop_last=True, no per-rank early "
    "stopping or `break`), wrap uneven inputs in `with model.join():` (DDP's Join), and let "
    "every rank reach destroy_process_group() after a final barrier. If a rank crashed on "
    "another node, its log there holds the cause.",
)


def infer(tallies: Tallies, hints: Hints) -> Tallies:
    tallies = dict(tallies)
    _progress_that_ended_well(tallies, hints)
    _same_rank_on_every_process(tallies, hints)
    _store_errors_after_their_cause(tallies)
    an_http_clients_errors(tallies, hints)
    _rank_zero_work(tallies, hints)
    _peer_exited_early(tallies)
    _dataparallel(tallies, hints)
    _sigkill_explained_by_memory(tallies)
    _stuck_watchdog_after_a_timeout(tallies)
    _system_port(tallies)
    sigterm_of_an_unknown_sender(tallies)
    _consequences_of_a_crash(tallies)
    return tallies


CRASHES = ("DDP504", "DDP505", "DDP506", "DDP512")  # a rank's own error, with its own cause
AFTER_A_CRASH = ("DDP513", "DDP514", "DDP515")  # what the others see once a rank is gone
# A job stopped from outside: every rank's exit, closed connection and timeout after it
AFTER_A_CANCEL = (*AFTER_A_CRASH, "DDP206", "DDP231", "DDP234", "DDP302", "DDP307")


def _consequences_of_a_crash(tallies: Tallies) -> None:
    """A rank that crashed takes its transport with it: the IB completions, EFA requests and
    a stuck watchdog that follow on the other ranks are consequences, reported after it. After
    a cancel (DDP507: a time limit, a preemption, scancel) so is every rank's failure, and
    slurmstepd's own connection errors."""
    cancel = tallies.get("DDP507")
    if cancel is not None and cancel.role == Role.CAUSE:
        _behind(tallies, cancel, AFTER_A_CANCEL)
        _stopped_after_a_failure(tallies, cancel)
    crashes = [t for code, t in tallies.items() if code in CRASHES and t.role == Role.CAUSE]
    if crashes:
        _behind(tallies, min(crashes, key=lambda t: t.first_line), AFTER_A_CRASH)


def _stopped_after_a_failure(tallies: Tallies, cancel: CodeTally) -> None:
    """DDP507's consequences are the failures that follow the stop (its explain text). A
    failure the log shows before it (a collective timeout, a rank's crash) had already ended
    the run's progress: the stop (a time limit reached while hung, a user's scancel) is then
    its consequence, reported after it."""
    before = [t for t in tallies.values() if t is not cancel and _a_failure_before(t, cancel)]
    if before:
        first = min(before, key=lambda t: t.first_line)
        cancel.judge(
            role=Role.SYMPTOM,
            note=f"the run had already failed when it was stopped ({first.code}, line "
            f"{first.first_line})",
        )


def _a_failure_before(tally: CodeTally, cancel: CodeTally) -> bool:
    pattern = tally.primary.pattern
    judged = tally.verdict.severity if tally.verdict else None
    severity = judged or pattern.severity or spec_for(pattern.code).severity
    failed = tally.role != Role.NOTE and severity == Severity.ERROR
    return failed and tally.first_line < cancel.first_line


def _behind(tallies: Tallies, first: CodeTally, codes: tuple[str, ...]) -> None:
    for code in codes:
        tally = tallies.get(code)
        if tally is not None and tally.first_line > first.first_line:
            tally.judge(
                role=Role.SYMPTOM, note=f"a consequence of {first.code} (line {first.first_line})"
            )


def _progress_that_ended_well(tallies: Tallies, hints: Hints) -> None:
    """Late ranks that arrived after all; NCCL shared memory that failed for its rights."""
    completed = hints.get(BARRIER_COMPLETED)
    for code in ("DDP202", "DDP207"):
        tally = tallies.get(code)
        waiting = tally and all("Waiting in store based barrier" in h.text for h in tally.kept)
        if waiting and completed and completed[-1].line > tally.first_line:
            del tallies[code]
    shm = tallies.get("DDP008")
    if shm and hints.get(SHM_NOT_WRITABLE) and all("NCCL" in h.text for h in shm.kept):
        del tallies["DDP008"]  # the NCCL WARN lines (DDP503) say what failed


def _same_rank_on_every_process(tallies: Tallies, hints: Hints) -> None:
    """Only rank 0 hosts the store: EADDRINUSE in any other process means it was told it is
    rank 0 (pytorch/pytorch#85604: `--local_rank 0` passed to every process)."""
    port = tallies.get("DDP201")
    if port is None:
        return
    why = _why_same_rank(tallies, hints)
    if why:
        del tallies["DDP201"]
        tallies["DDP233"] = _recoded(port, SAME_RANK_PATTERN, why=why)


def _why_same_rank(tallies: Tallies, hints: Hints) -> str:
    port = tallies["DDP201"]
    arguments = hints.get(SAME_LOCAL_RANK_ARGUMENT)
    launched = [hit for hit in arguments if hit.facts.get("launcher")]
    if launched:
        return f"the launch command passes --local_rank 0 to every process, line {launched[0].line}"
    if hints.counts.get(SAME_LOCAL_RANK_ARGUMENT, 0) > 1:
        return f"{hints.counts[SAME_LOCAL_RANK_ARGUMENT]} command lines pass --local_rank 0"
    waiting = tallies.get("DDP202")
    own_store = waiting and any("waiting for clients" in hit.text for hit in waiting.kept)
    if own_store:
        return (
            "the port's holder is this job's own store, waiting for its clients at line "
            f"{waiting.first_line}"
        )
    speakers = {_speaker(hit) for hit in port.kept} - {()}
    others = [s for s in speakers if any(value != 0 for key, value in s if key != "task")]
    if others:
        return f"the process printed as {_describe(others[0])} failed to bind"
    if len(speakers) > 1:
        return f"{len(speakers)} processes each tried to bind it"
    root = _torchrun_root(tallies)
    facts = root.facts() if root else {}
    root_rank, traceback = facts.get("rank"), str(facts.get("traceback", ""))
    if isinstance(root_rank, int) and root_rank != 0 and _bind_failed(traceback):
        return f"torchrun names rank {root_rank} as the process that failed, on the bind"
    return ""


# The bind failure in torchrun's traceback field of the rank that failed first: only then was
# that rank (not rank 0, which holds the store) the one refused. A rank that failed first for
# another reason says nothing about who bound the port: when the port is taken by another job,
# rank 0 reports EADDRINUSE and the others only time out, and may fail first (pytorch/pytorch
# #129367).
_BIND_FAILED = ("Address already in use", "address already in use", "EADDRINUSE", "errno: 98")


def _bind_failed(traceback: str) -> bool:
    return any(words in traceback for words in _BIND_FAILED)


def _store_errors_after_their_cause(tallies: Tallies) -> None:
    """A client that could not reach a store nobody could host (timed out, or refused: rank 0
    failed to bind and exited, so nothing listened), or a master that waited for a client
    that could not reach it, is a consequence."""
    if any(code in tallies for code in STORE_UNUSABLE):
        _demote(tallies, "DDP231", "DDP202", "DDP206")
    if "DDP231" in tallies or "DDP207" in tallies:
        _demote(tallies, "DDP202")


def _rank_zero_work(tallies: Tallies, hints: Hints) -> None:
    """Ranks that time out while rank 0 shows a long solo task (tokenising, mapping a dataset,
    saving, a wandb prompt) waited for rank 0: its work outlasted their timeout."""
    work = [hit for hit in hints.get(RANK0_WORK) if _is_rank_zero(hit)]
    waits = [tallies[code] for code in WAITS if code in tallies]
    waits = [t for t in waits if work and t.first_line >= work[0].line]
    if not waits:
        return
    waited = min(waits, key=lambda t: t.first_line)
    last_work = max((h for h in work if h.line <= waited.first_line), key=lambda h: h.line)
    facts = {
        **{k: v for k, v in last_work.facts.items() if k in ("work", "elapsed")},
        "waited_code": waited.code,
        "waited_line": waited.first_line,
        **{k: v for k, v in waited.facts().items() if k in ("timeout_ms", "op_type", "seq")},
    }
    existing = tallies.get("DDP232")
    if existing is not None:
        existing.judge(role=Role.CAUSE, evidence=facts)
    else:
        hit = replace(last_work, pattern=RANK0_WORK_PATTERN, facts=facts, role=Role.CAUSE)
        tallies["DDP232"] = CodeTally.start(hit)
    _demote(tallies, *(code for code in WAITS if code != "DDP232"))


def _peer_exited_early(tallies: Tallies) -> None:
    """A closed connection with no rank reporting an error of its own: a rank left early."""
    peer = tallies.get("DDP234")
    if peer is None or peer.role == Role.CAUSE:
        return
    if any(t.role == Role.CAUSE for t in tallies.values() if t is not peer):
        return
    if all(hit.pattern is NCCL_REMOTE_ERROR for hit in peer.kept) or _connect_failed(tallies):
        if _network_warnings_as_cause(tallies):
            peer.judge(severity=Severity.WARNING, note="a consequence of the failed connection")
        return
    if all("NCCL WARN" in hit.text for hit in peer.kept):  # NCCL's own socket lost its peer
        peer.judge(
            severity=Severity.WARNING,
            note="NCCL's own socket lost its peer (bootstrap or proxy): the peer's log says why",
        )
        return
    peer.judge(
        role=Role.CAUSE,
        fix=EARLY_EXIT_FIX,
        note="no rank in this log reports an error of its own: a rank most likely left its "
        "loop early (uneven batches, an early return or exit on one rank), or crashed where "
        "this log does not show",
    )


def _network_warnings_as_cause(tallies: Tallies) -> bool:
    """NCCL's remote error says "a peer exited or the network failed": its NCCL WARN lines
    about sockets or InfiniBand decide for the network."""
    warnings = tallies.get("DDP503")
    messages = [str(m) for m in (warnings.collected.get("message", []) if warnings else [])]
    if warnings and any(word in m for m in messages for word in _NETWORK_WORDS):
        warnings.judge(
            role=Role.CAUSE,
            severity=Severity.ERROR,
            note="they came before NCCL lost its peer: the network between the ranks failed",
        )
        return True
    return False


def _connect_failed(tallies: Tallies) -> bool:
    """NCCL could not connect before the connection closed: its WARN line says so."""
    warnings = tallies.get("DDP503")
    messages = [str(m) for m in (warnings.collected.get("message", []) if warnings else [])]
    return any("connect" in m.lower() and ("failed" in m or "timeout" in m) for m in messages)


def _dataparallel(tallies: Tallies, hints: Hints) -> None:
    wrapped = hints.get(DATAPARALLEL) or any(
        code in tallies for code in ("DDP510", "DDP109", "DDP405", "DDP125")
    )
    if wrapped and "DDP509" in tallies:
        tallies["DDP509"].judge(fix=DATAPARALLEL_DEVICE_FIX)
    backward = hints.get(NON_SCALAR_BACKWARD)
    if backward and "DDP125" in tallies:
        tallies["DDP125"].judge(
            role=Role.CAUSE,
            severity=Severity.ERROR,
            note=f"backward() on that vector then failed (line {backward[0].line}: grad can "
            "be implicitly created only for scalar outputs)",
        )


def _sigkill_explained_by_memory(tallies: Tallies) -> None:
    """A SIGKILL says nothing about memory by itself (DDP504's explain text): a rank killed by
    it stays DDP307, naming the signal, unless the log holds memory evidence of its own (the
    kernel's or slurmstepd's OOM line, OOMKilled); then the memory finding is the cause and
    the SIGKILL its consequence."""
    crashed = tallies.get("DDP307")
    memory = tallies.get("DDP504")
    if crashed is None or memory is None or crashed.role != Role.CAUSE:
        return
    if crashed.facts().get("signal") != "SIGKILL" or memory.role != Role.CAUSE:
        return
    crashed.judge(
        role=Role.SYMPTOM,
        note=f"the SIGKILL of the memory kill at line {memory.first_line} (DDP504)",
    )


def _stuck_watchdog_after_a_timeout(tallies: Tallies) -> None:
    """A watchdog stuck while a collective timed out in the same log (DDP513's explain text:
    the call it waits on hangs, e.g. the ncclCommAbort after the timeout) is the timeout's
    consequence, whichever line a rank printed first."""
    stuck, timeout = tallies.get("DDP513"), tallies.get("DDP302")
    if stuck is None or timeout is None:
        return
    others = [t for t in tallies.values() if t.role == Role.CAUSE and t not in (stuck, timeout)]
    if not others:  # then the hang is the first failure this log shows
        timeout.judge(role=Role.CAUSE)
    stuck.judge(
        role=Role.SYMPTOM,
        note=f"after the collective timeout of line {timeout.first_line} (DDP302): the watchdog "
        "hung tearing it down",
    )


def _system_port(tallies: Tallies) -> None:
    taken = tallies.get("DDP201")
    port = taken.facts().get("port") if taken else None
    if taken and isinstance(port, int) and port < 1024:
        taken.judge(note=f"port {port} is a system port (below 1024): use one of 1024 or above")


# --- helpers -----------------------------------------------------------------------------
def _demote(tallies: Tallies, *codes: str) -> None:
    for code in codes:
        if code in tallies and tallies[code].role == Role.CAUSE:
            tallies[code].judge(role=Role.SYMPTOM)


def _recoded(tally: CodeTally, pattern: Pattern, **facts: object) -> CodeTally:
    """The same lines, reported under another code."""
    hits = [replace(hit, pattern=pattern, facts={**hit.facts, **facts}) for hit in tally.kept]
    recoded = CodeTally.start(_primary_of(tally, hits))
    for hit in hits:
        if hit.line != recoded.primary.line:
            recoded.add(hit)
    recoded.count = tally.count
    return recoded


def _primary_of(tally: CodeTally, hits: Iterable[LogHit]) -> LogHit:
    return next((h for h in hits if h.line == tally.primary.line), next(iter(hits)))


def _torchrun_root(tallies: Tallies) -> CodeTally | None:
    crashed = tallies.get("DDP307")
    if crashed and crashed.primary.pattern.priority >= ROOT_CAUSE_PRIORITY:
        return crashed
    return None


def _speaker(hit: LogHit) -> tuple[tuple[str, object], ...]:
    keys = ("task", "rank", "local_rank")
    return tuple((key, hit.facts[key]) for key in keys if key in hit.facts)


def _describe(speaker: tuple[tuple[str, object], ...]) -> str:
    return ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in speaker)


def _is_rank_zero(hit: LogHit) -> bool:
    return all(hit.facts.get(key) in (None, 0) for key in ("rank", "local_rank"))
