"""`explain CODE_OR_NAME` and `rules`: the rules' own documentation."""

from __future__ import annotations

import json
import sys

import click
from tabulate import tabulate

from ddp_doctor import exitcodes
from ddp_doctor.registry import RuleSpec, all_rules, lookup


@click.command("explain")
@click.argument("code_or_name")
def explain_command(code_or_name: str) -> None:
    """Print what a rule finds, why it matters, an example and the fix."""
    spec = lookup(code_or_name)
    if spec is None:
        click.echo(
            f"ddp-doctor: error: no rule {code_or_name!r}; `ddp-doctor rules` lists them", err=True
        )
        sys.exit(exitcodes.USAGE)
    click.echo(explain_text(spec))


def explain_text(spec: RuleSpec) -> str:
    lines = [
        f"{spec.code} {spec.name} ({spec.severity.word})",
        "",
        spec.doc,
        "",
        f"Fix: {spec.fix.text}",
    ]
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
    specs = all_rules()
    if fmt == "json":
        rows = [
            {
                "code": s.code,
                "name": s.name,
                "severity": s.severity.word,
                "scope": s.scope,
                "summary": s.summary,
            }
            for s in specs
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    if fmt == "markdown":
        click.echo(rules_markdown(specs))
        return
    table = [(s.code, s.name, s.severity.word, s.summary) for s in specs]
    click.echo(tabulate(table, headers=("code", "name", "severity", "summary"), tablefmt="plain"))


def rules_markdown(specs: list[RuleSpec]) -> str:
    """The README's rule table, made from the rules' own docstrings."""
    lines = ["| code | name | severity | what it finds |", "|---|---|---|---|"]
    lines += [f"| {s.code} | {s.name} | {s.severity.word} | {s.summary} |" for s in specs]
    return "\n".join(lines)
