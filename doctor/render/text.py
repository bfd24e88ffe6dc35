"""`check`'s default format: one line per finding, `path:line:col: severity: CODE [name] message`
(the compiler's shape, with ruff's code and name); `-v` adds the fix under each."""

from __future__ import annotations

from ddp_doctor.model import Finding, Report, Severity


def render_text(report: Report, *, checked_files: int | None = None, verbose: bool = False) -> str:
    lines = []
    for finding in report.findings:
        lines.append(finding_line(finding))
        if verbose and finding.fix is not None:
            lines.append(f"    fix: {finding.fix.text}")
            lines.extend(f"    $ {command}" for command in finding.fix.commands)
    lines.append(summary(report.findings, checked_files))
    return "\n".join(lines) + "\n"


def render_findings_table(report: Report, *, checked_files: int | None = None) -> str:
    """`check --format table`: one row per finding in the columns every table of the doctor
    uses (columns.plain_table), then the same summary as the text format."""
    from ddp_doctor.render.columns import plain_table

    rows = [(_place(f), f.severity.word, f.code, f.name, f.message) for f in report.findings]
    parts = [plain_table(rows, ("where", "severity", "code", "name", "message"))] if rows else []
    parts.append(summary(report.findings, checked_files))
    return "\n\n".join(parts) + "\n"


def _place(finding: Finding) -> str:
    where = finding.location
    if where is None:
        return "-"
    cell = [] if where.cell is None else [f"cell {where.cell}"]
    return ":".join([where.path, *cell, str(where.line or 1), str(where.column or 1)])


def finding_line(finding: Finding) -> str:
    return f"{_place(finding)}: {finding.severity.word}: {finding.code} [{finding.name}] {finding.message}"


def summary(findings: tuple[Finding, ...] | list[Finding], checked_files: int | None) -> str:
    files = "" if checked_files is None else f" in {checked_files} file{_s(checked_files)}"
    if not findings:
        return f"No findings{files}."
    counts = [
        f"{count} {severity.word}{'' if severity is Severity.INFO else _s(count)}"
        for severity in sorted(Severity, reverse=True)
        if (count := sum(1 for f in findings if f.severity is severity))
    ]
    return f"Found {len(findings)} finding{_s(len(findings))}{files}: " + ", ".join(counts) + "."


def plural(count: int, word: str) -> str:
    """`1 file`, `2 files`."""
    return f"{count} {word}{_s(count)}"


def _s(count: int) -> str:
    return "" if count == 1 else "s"
