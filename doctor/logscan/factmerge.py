"""The probes' rules' findings on a log's facts (factrules.py) merged with the pattern
table's: a judged finding replaces the table's finding of its code and comes first among the
causes, after a rank's own crash; DDP307 keeps the table's place and role (torchrun's root
cause, judged by the live rule); a warning about variables differing (DDP309) comes last.
"""

from __future__ import annotations

from ddp_doctor.logscan.logfacts import LogFacts
from ddp_doctor.logscan.pattern import Role
from ddp_doctor.model import Finding, Location

CRASH_CODES = ("DDP236", "DDP504", "DDP505", "DDP506", "DDP512")  # a rank's own error stays first
IN_PLACE = ("DDP307",)
LAST = ("DDP309",)


def with_fact_findings(
    results: list[tuple[Role, Finding]], facts: LogFacts, source: str | None
) -> list[tuple[Role, Finding]]:
    """The findings of the log's facts with the table's (see the module's docstring)."""
    if not facts.worth_judging():
        return results
    from ddp_doctor.logscan.factrules import findings_from_facts

    by_code = {finding.code: finding for _, finding in results}
    texts = _texts_by_place(results)
    judged, in_place, last = [], {}, []
    for finding, number in findings_from_facts(facts, by_code):
        path, line = facts.locate(number, source)
        location = Location(path, line) if path else finding.location
        finding = _replace(finding, evidence=_local_lines(finding.evidence, number, line))
        table = by_code.get(finding.code)  # the table's own finding keeps its line's evidence
        evidence = {**table.evidence, **finding.evidence} if table else finding.evidence
        if "text" not in evidence and (path, line) in texts:  # its line, as another code quoted it
            evidence = {**evidence, "text": texts[path, line]}
        finding = _replace(finding, location=location, evidence=evidence)
        if finding.code in IN_PLACE and table is not None:
            read = finding.evidence.get("from_log_facts")
            in_place[finding.code] = _replace(
                table, evidence={**table.evidence, "from_log_facts": read}
            )
        elif finding.code in LAST:
            last.append((Role.CAUSE, finding))
        else:
            judged.append((Role.CAUSE, finding))
    if not judged and not in_place and not last:
        return results
    codes = {finding.code for _, finding in judged + last} | _superseded(judged)
    kept = [(role, in_place.get(f.code, f)) for role, f in results if f.code not in codes]
    if not judged and not last:
        return kept  # the table's order stands
    crashes = [pair for pair in kept if pair[0] == Role.CAUSE and pair[1].code in CRASH_CODES]
    rest = [pair for pair in kept if pair not in crashes]
    return [*crashes, *judged, *rest, *last]


def _superseded(judged: list[tuple[Role, Finding]]) -> set[str]:
    """The table's codes a judged finding reads better ("instead_of" in its facts): gloo's
    "Unable to find address for" about a host name is DDP204, not the table's DDP205."""
    reads = (finding.evidence.get("from_log_facts") for _, finding in judged)
    return {
        str(read["instead_of"]) for read in reads if isinstance(read, dict) and "instead_of" in read
    }


def _texts_by_place(results: list[tuple[Role, Finding]]) -> dict[tuple, object]:
    """The evidence text of each table finding, by its file and line."""
    texts: dict[tuple, object] = {}
    for _, finding in results:
        where = finding.location
        if where is not None and finding.evidence.get("text"):
            texts.setdefault((where.path, where.line), finding.evidence["text"])
    return texts


def _local_lines(evidence: dict, number: int, line: int) -> dict:
    """The fact's line within its own file, in the evidence (the same in a single log)."""
    if number == line:
        return evidence
    read = evidence.get("from_log_facts")
    if isinstance(read, dict) and read.get("line") == number:
        read = {**read, "line": line}
    return {**evidence, "line": line, "from_log_facts": read}


def _replace(finding: Finding, **changes: object) -> Finding:
    from dataclasses import replace

    return replace(finding, **changes)
