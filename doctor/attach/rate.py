"""The step rate of a job that progresses, from what the samples show: a step counter of the
user's training loop (an integer local of the main thread's own frames named step, iteration,
i, batch_idx ...; py-spy --locals reads it) that rose between the first and the last sample.
Where none is visible, the pace of the collectives in a flight-recorder dump written during
this attach (its last entries' sequence numbers and creation times): collectives per second,
not steps. Absent when neither is visible, with why; NCCL's RAS is read once, so it gives no
rate. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddp_doctor.attach.places import is_user_frame
from ddp_doctor.facts.attach import LoopCounter, RankSample, RecorderPace
from ddp_doctor.facts.trace import Site

ONCE_ONLY = (
    "and no flight-recorder dump written during this attach counts collectives (the job set "
    "no TORCH_NCCL_DEBUG_INFO_PIPE_FILE and started no debug server; NCCL's RAS is read once, "
    "so gives no rate)"
)


@dataclass(frozen=True)
class StepRate:
    per_s: float | None  # None: not visible, see why
    rank: int | None = None
    counter: str = ""  # "train:step", the function and the local
    where: str = ""  # the file of the function
    rose: int = 0
    span_s: float = 0.0
    why: str = ""
    collectives_per_s: float | None = None  # from a fresh flight-recorder dump, where no step
    group: str = ""  # counter is visible: its process group

    def describe(self) -> str:
        if self.per_s is None and self.collectives_per_s is not None:
            return (
                f"step rate not visible, {self.collectives_per_s:g} collectives/s of process "
                f"group {self.group} (rank {self.rank}'s flight recorder: {self.rose} in "
                f"{self.span_s:g} s)"
            )
        if self.per_s is None:
            return f"step rate not visible: {self.why}"
        return (
            f"{self.per_s:g} steps/s (rank {self.rank}'s `{self.counter}` rose {self.rose} in "
            f"{self.span_s:g} s)"
        )


def step_rate(
    ranks: Sequence[tuple[int, Sequence[RankSample]]],
    paces: Sequence[tuple[int, RecorderPace | None]] = (),
) -> StepRate:
    """From (rank key, samples) pairs: the best-named counter that rose, lowest rank first;
    else the lowest rank's pace of collectives from (rank key, pace) pairs."""
    found: list[tuple[int, int, StepRate]] = []
    seen: set[str] = set()
    read_twice = False
    for key, samples in ranks:
        read = [s for s in samples if s.threads]
        if len(read) < 2:
            continue
        read_twice = True
        first, last = read[0], read[-1]
        span = round(last.at_s - first.at_s, 3)
        before = {_key(c): c.value for c in _own(first.counters)}
        seen.update(f"{c.function}:{c.name}" for c in _own(last.counters))
        for counter in _own(last.counters):
            start = before.get(_key(counter))
            if start is None or counter.value <= start or span <= 0:
                continue
            rose = counter.value - start
            rate = StepRate(
                round(rose / span, 2),
                key,
                f"{counter.function}:{counter.name}",
                counter.path,
                rose,
                span,
            )
            found.append((_priority(counter.name), key, rate))
    if found:
        return min(found, key=lambda item: (item[0], item[1]))[2]
    why = _why(read_twice, seen)
    timed = sorted((key, pace) for key, pace in paces if pace is not None and key >= 0)
    if timed:
        key, pace = timed[0]
        per_s = round(pace.collectives / pace.span_s, 2)
        return StepRate(
            None, key, rose=pace.collectives, span_s=pace.span_s, why=why,
            collectives_per_s=per_s, group=pace.group,
        )  # fmt: skip
    return StepRate(None, why=why)


def _own(counters: Sequence[LoopCounter]) -> list[LoopCounter]:
    return [c for c in counters if is_user_frame(Site(c.path, 0, c.function))]


def _key(counter: LoopCounter) -> tuple[str, str, str]:
    return counter.path, counter.function, counter.name


def _priority(name: str) -> int:
    lowered = name.lower()
    return 0 if "step" in lowered else 1 if "iter" in lowered else 2


def _why(read_twice: bool, seen: set[str]) -> str:
    if not read_twice:
        return f"no rank's stack was read in two samples, {ONCE_ONLY}"
    if not seen:
        return (
            "no integer step counter (step, iteration, i, batch_idx ...) is a local of the "
            "main thread's own frames (a loop at a script's top level has no locals py-spy "
            f"can read), {ONCE_ONLY}"
        )
    return (
        f"no step counter rose between the samples ({', '.join(sorted(seen)[:4])} seen), "
        f"{ONCE_ONLY}"
    )
