"""Hung, or just slow: each rank's samples compared (stack, main-thread CPU time, wake-ups),
then one verdict for the job. Pure functions over AttachFacts; the rules and the renderers
read the same verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddp_doctor.attach import collectives
from ddp_doctor.attach.places import INIT, WAITING_KINDS, Place, main_thread, place_of
from ddp_doctor.facts.attach import AttachedRank, AttachFacts, ChildProcess, RankSample

PROGRESSING, HUNG, MISMATCHED, STUCK, DEAD, WAITING_FOR_BUSY, UNSEEN = (
    "progressing",
    "hung in a collective",
    "mismatched collectives",
    "stuck outside collectives",
    "a rank is dead",
    "waiting for a busy rank",
    "not seen",
)
MOSTLY = 0.7  # share of the samples: a straggler is outside (and the others wait) in most
QUIET_CPU_S = 0.02  # main-thread CPU per second of sampling below which a rank is idle
QUIET_SWITCHES = 2  # wake-ups of the main thread per sample interval still counted as idle
DEAD_STATES = ("zombie", "gone")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "127.0.1.1")


@dataclass(frozen=True)
class RankView:
    key: int  # the rank, or -pid where the rank is unknown
    rank: AttachedRank
    places: tuple[Place, ...]
    same_stack: bool  # the main thread's frames did not change between samples
    quiet: bool  # its main thread neither ran nor woke (None facts: not quiet)
    stacks_seen: bool

    @property
    def last(self) -> Place:
        return self.places[-1]

    def mostly(self, waiting: bool) -> Place | None:
        """Its most frequent place in a collective (or outside them), where most samples
        found it so; None otherwise. One sample that caught a straggler in its own short
        all-reduce, or a waiting rank between two steps, does not undo the pattern."""
        kinds = (*WAITING_KINDS, INIT)
        chosen = [p for p in self.places if (p.kind in kinds) == waiting]
        if not chosen or len(chosen) < MOSTLY * len(self.places):
            return None
        return max(chosen, key=lambda p: (chosen.count(p), self.places.index(p)))

    @property
    def waiting_throughout(self) -> bool:
        """In a collective, or in init_process_group's rendezvous, at every sample."""
        return all(p.kind in (*WAITING_KINDS, INIT) for p in self.places)

    @property
    def in_init(self) -> bool:
        return all(p.kind == INIT for p in self.places)

    @property
    def stuck_waiting(self) -> bool:
        """It waits and did not move: its main thread neither ran nor woke, or it is in
        init_process_group, whose store client wakes hundreds of times a second to poll."""
        return self.waiting_throughout and self.same_stack and (self.quiet or self.in_init)

    @property
    def state(self) -> str:
        return self.rank.samples[-1].state if self.rank.samples else "unknown"

    @property
    def dead_workers(self) -> tuple[ChildProcess, ...]:
        last = self.rank.samples[-1].children if self.rank.samples else ()
        return tuple(c for c in last if c.state in DEAD_STATES)

    def label(self) -> str:
        host = f" on {self.rank.host}" if self.rank.host else ""
        return f"{label(self.key)}{host}"


@dataclass(frozen=True)
class Verdict:
    kind: str
    views: tuple[RankView, ...]
    waiting: tuple[int, ...] = ()  # keys of the ranks waiting in the collective
    missing: tuple[int, ...] = ()  # keys of the ranks on this host that are elsewhere
    absent: tuple[int, ...] = ()  # ranks of the world seen on no host attached
    op: str | None = None
    busy: tuple[int, ...] = ()  # ranks the others wait for while they work
    mismatch: collectives.Mismatch | None = None
    seq: int | None = None  # the collective's sequence number, where flight recorders say it
    group: str = "0"
    gone: tuple[int, ...] = ()  # ranks of a one-host job that no process of this host has

    def view(self, key: int) -> RankView:
        return next(v for v in self.views if v.key == key)


def label(key: int) -> str:
    return f"rank {key}" if key >= 0 else f"pid {-key} (rank unknown)"


def views_of(facts: AttachFacts) -> tuple[RankView, ...]:
    return tuple(_view(rank) for rank in facts.ranks if rank.samples)


def _view(rank: AttachedRank) -> RankView:
    places = tuple(place_of(s) for s in rank.samples)
    stacks = [_frames(s) for s in rank.samples]
    seen = all(stacks)
    return RankView(
        key=rank.rank if rank.rank is not None else -rank.pid,
        rank=rank,
        places=places,
        same_stack=seen and len(set(stacks)) == 1,
        quiet=_quiet(rank.samples),
        stacks_seen=seen,
    )


def _frames(sample: RankSample) -> tuple[tuple[str, int, str], ...]:
    thread = main_thread(sample)
    return tuple((f.path, f.line, f.function) for f in thread.frames) if thread else ()


def _quiet(samples: Sequence[RankSample]) -> bool:
    first, last = samples[0], samples[-1]
    if len(samples) < 2 or None in (first.main_cpu_s, last.main_cpu_s):
        return False
    span = max(last.at_s - first.at_s, 0.001)
    cpu = (last.main_cpu_s or 0.0) - (first.main_cpu_s or 0.0)
    woke = (last.main_switches or 0) - (first.main_switches or 0)
    return cpu / span < QUIET_CPU_S and woke <= QUIET_SWITCHES * (len(samples) - 1)


def verdict_of(facts: AttachFacts) -> Verdict:
    views = views_of(facts)
    if not views:
        return Verdict(UNSEEN, views)
    absent = _absent(facts, views)
    dead = tuple(v.key for v in views if v.state in DEAD_STATES)
    gone = () if dead else _gone(views, absent)
    if dead or gone:
        alive = tuple(v.key for v in views if v.key not in dead)
        rest = tuple(r for r in absent if r not in gone)
        return Verdict(DEAD, views, waiting=alive, missing=dead, absent=rest, gone=gone)
    if not any(v.stacks_seen for v in views):
        return Verdict(UNSEEN, views, absent=absent)
    stuck = [v for v in views if v.stuck_waiting]
    if stuck:
        return _waiting_verdict(views, stuck, absent)
    if all(v.stacks_seen and v.same_stack and v.quiet for v in views):
        return Verdict(STUCK, views, missing=tuple(v.key for v in views), absent=absent)
    return Verdict(PROGRESSING, views, busy=_stragglers(views), absent=absent)


def _waiting_verdict(
    views: Sequence[RankView], stuck: Sequence[RankView], absent: tuple[int, ...]
) -> Verdict:
    places: Mapping[int, Place] = {v.key: v.last for v in views}
    waiting_places = {v.key: v.last for v in stuck}
    records = _records(views)
    found = collectives.mismatches(waiting_places, records)
    if found:
        return Verdict(MISMATCHED, tuple(views), waiting=tuple(found[0].calls), mismatch=found[0])
    stall = collectives.stall(places, records)
    op = stall.call.op if stall else stuck[0].last.op
    waiting = tuple(stall.waiting) if stall else tuple(v.key for v in stuck)
    others = [v for v in views if v.key not in waiting]
    busy = tuple(v.key for v in others if not v.same_stack)
    kind = WAITING_FOR_BUSY if busy else HUNG
    missing = tuple(v.key for v in others)
    seq = stall.call.seq if stall and records else None
    group = stall.call.group if stall else "0"
    return Verdict(kind, tuple(views), waiting, missing, absent, op, busy, seq=seq, group=group)


def _records(views: Sequence[RankView]) -> dict[int, tuple] | None:
    """Every rank's flight-recorder entries, or None unless every rank has some."""
    if all(v.rank.flight_recorder for v in views):
        return {v.key: v.rank.flight_recorder for v in views}
    return None


def _stragglers(views: Sequence[RankView]) -> tuple[int, ...]:
    """A rank outside collectives in most samples while every other rank waited in one in
    most: the others spend their time waiting for it (with two samples: in both)."""
    if len(views) < 2 or len(views[0].places) < 2:
        return ()
    found = []
    for view in views:
        others = [v for v in views if v is not view]
        outside = view.mostly(waiting=False) is not None
        if outside and all(o.mostly(waiting=True) is not None for o in others):
            found.append(view.key)
    return tuple(found)


def _gone(views: Sequence[RankView], absent: tuple[int, ...]) -> tuple[int, ...]:
    """The ranks of the world that are on no host, where the job runs on this host alone and
    every rank seen stands still: they ended (and were reaped) or never started."""
    if not absent or any(v.key < 0 for v in views) or not single_host(views):
        return ()
    return absent if all(v.same_stack and (v.quiet or v.in_init) for v in views) else ()


def single_host(views: Sequence[RankView]) -> bool:
    """Whether the ranks seen say their job has no other node: a loopback MASTER_ADDR (no
    other host can reach it), torchrun's LOCAL_WORLD_SIZE equal to WORLD_SIZE, or a
    one-node SLURM job."""
    if len({v.rank.host for v in views}) > 1:
        return False
    for view in views:
        env, rank = view.rank.env, view.rank
        if rank.master_addr in LOOPBACK:
            return True
        if env.get("LOCAL_WORLD_SIZE") and env.get("LOCAL_WORLD_SIZE") == env.get("WORLD_SIZE"):
            return True
        if (env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES")) == "1":
            return True
    return False


def _absent(facts: AttachFacts, views: Sequence[RankView]) -> tuple[int, ...]:
    sizes = {v.rank.world_size for v in views if v.rank.world_size}
    if len(sizes) != 1:
        return ()
    seen = {v.key for v in views}
    return tuple(r for r in range(sizes.pop()) if r not in seen)
