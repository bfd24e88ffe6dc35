"""Reads the dumps of one job (one per rank) and runs the one collective analysis over them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.facts.collectives import RankCollectives
from ddp_doctor.flightrec.dumps import DumpError, RankDump, read_dump
from ddp_doctor.flightrec.findings import findings_of, unreadable_findings
from ddp_doctor.model import Finding
from ddp_doctor.readings.collective_progress import CollectiveProgress, collective_progress


@dataclass(frozen=True)
class FlightRecord:
    causes: list[Finding]  # where the ranks diverged
    symptoms: list[Finding]  # a collective every rank entered and none finished
    notes: list[Finding]  # dumps that could not be read
    dumps: list[RankDump]
    comparison: CollectiveProgress

    @property
    def findings(self) -> list[Finding]:
        return [*self.causes, *self.symptoms, *self.notes]


def rank_records(dumps: list[RankDump]) -> list[RankCollectives]:
    """The dumps as the analysis reads them; a dump whose file name names no rank is left out."""
    return [
        RankCollectives(dump.rank, dump.entries, dump.group_ranks)
        for dump in dumps
        if dump.rank is not None
    ]


def read_flight_record(paths: list[Path]) -> FlightRecord:
    """Reads the dumps (one per rank) and compares them; unreadable ones become DDP511."""
    dumps: list[RankDump] = []
    unreadable: dict[str, str] = {}
    for path in paths:
        try:
            dumps.append(read_dump(path))
        except DumpError as error:
            unreadable[str(path)] = str(error)
    comparison = collective_progress(rank_records(dumps))
    causes, symptoms = findings_of(comparison)
    return FlightRecord(causes, symptoms, unreadable_findings(unreadable), dumps, comparison)
