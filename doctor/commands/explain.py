"""`explain CODE_OR_NAME` and `rules`: the rules' own documentation."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ddp_doctor import exitcodes, strict_json
from ddp_doctor.codes import CODES, Code
from ddp_doctor.registry import RuleSpec, lookup
from ddp_doctor.render.columns import plain_table
from ddp_doctor.trust.output import print_text


@click.command("explain")
@click.argument("code_or_name")
def explain_command(code_or_name: str) -> None:
    """Print what a rule finds, why it matters, an example and the fix."""
    from ddp_doctor.registry import find_code
    from ddp_doctor.rule_docs import documented

    entry = find_code(code_or_name)
    spec = (documented(entry.code) or lookup(entry.code)) if entry else None
    if spec is None:
        click.echo(
            f"ddp-doctor: error: no rule {code_or_name!r}; `ddp-doctor rules` lists them", err=True
        )
        sys.exit(exitcodes.USAGE)
    print_text(explain_text(spec))


def explain_text(spec: RuleSpec) -> str:
    """The four parts once each: the docstring's Fix part, then the fix a finding carries
    (its text and commands) under the same heading."""
    doc, has_fix, doc_fix = (
        spec.doc.rpartition("Fix:") if "Fix:" in spec.doc else (spec.doc, "", "")
    )
    lines = [f"{spec.code} {spec.name} ({spec.severity.word})", "", doc.rstrip()]
    fix = " ".join(doc_fix.split())
    lines.append(f"Fix: {fix}" if has_fix else "Fix:")
    if " ".join(spec.fix.text.split()) != fix:
        lines.append(f"  {spec.fix.text}")
    lines.extend(f"  $ {command}" for command in spec.fix.commands)
    return "\n".join(lines)


@click.command("rules")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "markdown"]),
    default="table",
    show_default=True,
)
def rules_command(fmt: str) -> None:
    """List every rule: code, name, severity and a one-line summary."""
    specs = CODES
    if fmt == "json":
        rows = [
            {
                "code": s.code,
                "name": s.name,
                "severity": s.severity.word,
                "judged": s.judged,
                "summary": s.summary,
            }
            for s in specs
        ]
        print_text(strict_json.dumps(rows, indent=2))
        return
    if fmt == "markdown":
        print_text(rules_markdown(specs))
        return
    table = [(s.code, s.name, s.severity.word, s.summary) for s in specs]
    print_text(plain_table(table, headers=("code", "name", "severity", "summary")))


def rules_markdown(specs: Sequence[Code]) -> str:
    """The README's rule table, made from the code table."""
    lines = ["| code | name | severity | what it finds |", "|---|---|---|---|"]
    lines += [f"| {s.code} | {s.name} | {s.severity.word} | {s.summary} |" for s in specs]
    return "\n".join(lines)
