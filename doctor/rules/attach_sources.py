"""DDP705: what NCCL's RAS service says of the attached job's communicators. A facts rule over
AttachFacts.ras, so `diagnose` judges a saved report again."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.attach import AttachFacts, RasCommunicator, RasRank
from ddp_doctor.facts.machine import FactSet
from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule


@rule(
    "DDP705",
    Remediation(
        "Look at the named rank first: its process (is it alive, see `attach` on its host), "
        "its node's network and GPU (dmesg, nvidia-smi); the other ranks wait for it until "
        "the NCCL timeout."
    ),
)
def nccl_ras_ranks_behind(facts: FactSet) -> Iterator[Hit]:
    """What it finds: NCCL's RAS service (NCCL 2.24+, JSON since 2.28) reports a communicator
    whose ranks are missing (unresponsive, or considered dead), or a rank that has done fewer
    collectives than the others of its communicator.
    Why it matters: RAS sees every node of the job from one host: the missing or lagging rank
    is where the hang starts, even when it runs on another node.
    Example: one node's process was killed by the out-of-memory killer; a rank is stuck in
    its data loading while the others wait in all_reduce.
    Fix: attach on the named rank's host, or read its node's logs.
    """
    attached: AttachFacts | None = facts.attach
    if attached is None or attached.ras is None:
        return
    for communicator in attached.ras.communicators:
        parts = [_missing(r) for r in communicator.ranks if r.missing]
        parts += _behind(communicator)
        if parts:
            yield Hit(
                f"NCCL RAS ({attached.ras.address}): communicator {communicator.hash} of "
                f"{communicator.size} ranks: " + "; ".join(parts),
                {
                    "communicator": communicator.hash,
                    "missing": [r.rank for r in communicator.ranks if r.missing],
                    "behind": [r.rank for r in _lagging(communicator)],
                },
            )


def _missing(rank: RasRank) -> str:
    how = (
        "considered dead"
        if rank.considered_dead
        else "unresponsive"
        if rank.unresponsive
        else "missing"
    )
    where = f" on {rank.host}" if rank.host else ""
    pid = f" (pid {rank.pid})" if rank.pid else ""
    return f"rank {rank.rank}{where}{pid} is {how}"


def _lagging(communicator: RasCommunicator) -> list[RasRank]:
    present = [r for r in communicator.ranks if not r.missing and r.counts]
    if len(present) < 2:
        return []
    most = max(sum(r.counts.values()) for r in present)
    return [r for r in present if sum(r.counts.values()) < most]


def _behind(communicator: RasCommunicator) -> list[str]:
    present = [r for r in communicator.ranks if not r.missing and r.counts]
    lagging = _lagging(communicator)
    if not lagging:
        return []
    most = max(sum(r.counts.values()) for r in present)
    return [
        f"rank {r.rank}{f' on {r.host}' if r.host else ''} has done {sum(r.counts.values())} "
        f"collectives, the others up to {most}"
        for r in lagging
    ]
