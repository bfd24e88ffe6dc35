"""Reads fixtures/logs/wordings/wordings.tsv: one wording of a known cause a row.

Columns: the text (`\\n` between its lines, as it appears in a log), the code `logs` must put
first (or `none`), and where the wording comes from (project and file, or issue thread).
Lines starting with `#`, and the header, are not rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "wordings" / "wordings.tsv"


@dataclass(frozen=True)
class Wording:
    line: int  # in the table
    text: str
    expected: str  # a code, or "none"
    source: str

    @property
    def id(self) -> str:
        return f"{self.line}-{self.expected}"


def read_table(path: Path = TABLE) -> list[Wording]:
    rows = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip() or raw.startswith("#") or raw.startswith("text\t"):
            continue
        text, expected, source = raw.split("\t")
        rows.append(Wording(number, text.replace("\\n", "\n") + "\n", expected, source))
    return rows
