"""Readings of the job's facts that the DDP2xx-DDP4xx rules share: who got stuck where."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass

from ddp_doctor.facts.job import COLLECTIVE_STAGES, JobFacts, RankFacts

# Texts of errors a rank gets because ANOTHER rank failed or went silent. A rank whose error
# is one of these is a bystander; the root cause is elsewhere.
CONSEQUENCE_TEXTS = (
    "timed out",
    "timeout",
    "connection closed by peer",
    "connection reset",
    "broken pipe",
    "remote worker crashing",
    "communicator was aborted",
    "clients joined",
)
TERMINATED_BY_TORCHRUN = -signal.SIGTERM  # torchrun stops the other ranks with SIGTERM
ABORTED = -signal.SIGABRT
WATCHDOG_TIMEOUT = "Watchdog caught collective operation timeout"


def job_failed(job: JobFacts) -> bool:
    return job.launched and (job.timed_out or (job.exit_code or 0) != 0)


def is_consequence(error: str | None) -> bool:
    text = (error or "").lower()
    return any(marker in text for marker in CONSEQUENCE_TEXTS)


@dataclass(frozen=True)
class Stuck:
    """A rank that started a stage and neither finished nor failed it on its own."""

    rank: int
    stage: str


def stuck_ranks(job: JobFacts) -> list[Stuck]:
    """Ranks whose last stage never ended, and that were not themselves killed mid-work."""
    if not job_failed(job) or any(died_by_itself(rank, job) for rank in job.ranks):
        return []  # a rank that died explains why its peers waited (DDP307)
    if cut_by_timeout(job):
        return []  # the run's --timeout ended ranks still within their own limits (DDP906)
    if not job.timed_out and all(rank.last_started is None for rank in job.ranks):
        return []  # no rank ever started: a launcher failure, not a rank that stayed away
    found = []
    for rank in job.ranks:
        last = rank.last_started
        if last is None:
            found.append(Stuck(rank.rank, "init"))
        elif not last.ended and not died_by_itself(rank, job):
            found.append(Stuck(rank.rank, last.stage))
    return found


# A rank starts (torchrun imports torch, then the rank imports torch in its init stage) and
# meets the others within init_timeout_s plus this; a slower start is its own problem.
START_ALLOWANCE_S = 20.0
# A collective fails by itself after the group timeout (init_timeout_s); past it plus this,
# a rank still waiting is hung, not slow.
COLLECTIVE_ALLOWANCE_S = 5.0


@dataclass(frozen=True)
class CutShort:
    """A rank still inside its own time limits when the job's deadline killed it."""

    rank: int
    stage: str  # "starting" when the rank had not begun its first stage
    running_s: float


def cut_by_timeout(job: JobFacts) -> list[CutShort]:
    """The ranks the run's --timeout cut short, when that is all that went wrong: the job
    was killed at its deadline, no rank failed by itself, and every unfinished rank was still
    within the limit its stage has of its own. Empty otherwise."""
    if not (job.launched and job.timed_out):
        return []
    if any(died_by_itself(rank, job) for rank in job.ranks):
        return []
    cut = []
    for rank in job.ranks:
        last = rank.last_started
        if last is not None and last.ended:
            continue
        stage = last.stage if last is not None else "starting"
        running = last.running_s if last is not None else job.duration_s
        if running is None or running >= _own_limit(job, stage):
            return []  # a stage past its own limit is a hang, for the hang rules to name
        cut.append(CutShort(rank.rank, stage, running))
    return cut


def _own_limit(job: JobFacts, stage: str) -> float:
    if stage in ("starting", "init"):
        return job.init_timeout_s + START_ALLOWANCE_S
    return job.init_timeout_s + COLLECTIVE_ALLOWANCE_S


def waited_ranks(job: JobFacts, stage: str) -> list[RankFacts]:
    """Ranks that failed `stage` with a timeout-like error: they waited for someone."""
    return [r for r in job.ranks if _failed_at(r, stage) and is_consequence(_failed_at(r, stage))]


def _failed_at(rank: RankFacts, stage: str) -> str | None:
    record = rank.stage(stage)
    if record is not None and record.ended and not record.ok:
        return record.error or "failed"
    return None


def died_by_itself(rank: RankFacts, job: JobFacts) -> bool:
    """Failed with an error of its own, or died mid-stage by an exit code or a signal that
    was not torchrun's SIGTERM (which only stops the bystanders), nor NCCL's watchdog abort."""
    last = rank.last_started
    if last is not None and last.ended and not last.ok:
        return not is_consequence(last.error)
    code = rank.exit_code
    if code == ABORTED and WATCHDOG_TIMEOUT in job.output_tail:
        return False  # the watchdog aborts every rank of a hung collective (SIGABRT)
    return code is not None and code not in (0, TERMINATED_BY_TORCHRUN)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exit code {code}"


def collective_stage(stage: str) -> bool:
    return stage in COLLECTIVE_STAGES or stage == "memory"


def rank_list(ranks: Iterable[int]) -> str:
    """1, 2, 5, 6, 7, 8 -> "1, 2, 5-8": runs of three or more as ranges, so 8,192 ranks stay
    one short line."""
    ordered = sorted(set(ranks))
    parts, start = [], 0
    for index in range(1, len(ordered) + 1):
        if index < len(ordered) and ordered[index] == ordered[index - 1] + 1:
            continue
        run = ordered[start:index]
        parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
        start = index
    return ", ".join(parts)
