"""Reads the dumps of one job (one per rank) and compares them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.flightrec.compare import Comparison, compare
from ddp_doctor.flightrec.dumps import DumpError, RankDump, read_dump
from ddp_doctor.flightrec.findings import findings_of, unreadable_findings
from ddp_doctor.model import Finding


@dataclass(frozen=True)
class FlightRecord:
    causes: list[Finding]  # where the ranks diverged
    symptoms: list[Finding]  # a collective every rank entered and none finished
    notes: list[Finding]  # dumps that could not be read
    dumps: list[RankDump]
    comparison: Comparison

    @property
    def findings(self) -> list[Finding]:
        return [*self.causes, *self.symptoms, *self.notes]


def read_flight_record(paths: list[Path]) -> FlightRecord:
    """Reads the dumps (one per rank) and compares them; unreadable ones become DDP511."""
    dumps: list[RankDump] = []
    unreadable: dict[str, str] = {}
    for path in paths:
        try:
            dumps.append(read_dump(path))
        except DumpError as error:
            unreadable[str(path)] = str(error)
    comparison = compare(dumps)
    causes, symptoms = findings_of(comparison)
    return FlightRecord(causes, symptoms, unreadable_findings(unreadable), dumps, comparison)
