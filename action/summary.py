"""The action's view of one `check` run, from its SARIF file: an annotation per finding on the
log (GitHub shows them on the pull request) and the job summary (counts by severity, the top
findings with links to their lines). Standard library only; run with the action's own Python:

    python summary.py ddp-doctor.sarif EXIT_CODE SUMMARY_FILE
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any
from urllib.parse import unquote, urlparse

TOP = 20
LEVELS = {"error": "error", "warning": "warning", "note": "notice"}
WORDS = {"error": "error", "warning": "warning", "note": "info"}


def main(sarif_path: str, exit_code: str, summary_path: str) -> None:
    with open(sarif_path, encoding="utf-8") as handle:
        sarif = json.load(handle)
    results = [(run, result) for run in sarif.get("runs", []) for result in run.get("results", [])]
    for run, result in results:
        print(annotation(result, rule_name(run, result)))
    with open(summary_path, "a", encoding="utf-8") as summary:
        summary.write(summary_markdown(results, exit_code))


def rule_name(run: dict[str, Any], result: dict[str, Any]) -> str:
    rules = run.get("tool", {}).get("driver", {}).get("rules", [])
    found = next((r for r in rules if r.get("id") == result.get("ruleId")), {})
    return str(found.get("name", ""))


def location(result: dict[str, Any]) -> tuple[str, int, int] | None:
    for place in result.get("locations", []):
        physical = place.get("physicalLocation", {})
        uri = physical.get("artifactLocation", {}).get("uri")
        if uri:
            region = physical.get("region", {})
            path = unquote(urlparse(uri).path) if uri.startswith("file:") else uri
            return path, int(region.get("startLine", 1)), int(region.get("startColumn", 1))
    return None


def annotation(result: dict[str, Any], name: str) -> str:
    level = LEVELS.get(result.get("level", "warning"), "warning")
    properties = []
    where = location(result)
    if where is not None:
        path, line, column = where
        properties += [f"file={_property(path)}", f"line={line}", f"col={column}"]
    title = f"{result.get('ruleId')} {name}".strip()
    properties.append(f"title={_property(title)}")
    message = result.get("message", {}).get("text", "")
    return f"::{level} {','.join(properties)}::{_data(message)}"


def summary_markdown(results: list[tuple[dict[str, Any], dict[str, Any]]], exit_code: str) -> str:
    counts = {word: 0 for word in ("error", "warning", "info")}
    for _, result in results:
        counts[WORDS.get(result.get("level", "warning"), "warning")] += 1
    words = [f"{n} {w}{'s' if n != 1 and w != 'info' else ''}" for w, n in counts.items()]
    lines = ["## ddp-doctor check", "", f"**{', '.join(words)}** (exit code {exit_code}).", ""]
    if results:
        lines += ["| severity | code | where | message |", "|---|---|---|---|"]
        for run, result in results[:TOP]:
            level = WORDS.get(result.get("level", "warning"), "warning")
            code = f"{result.get('ruleId')} {rule_name(run, result)}".strip()
            lines.append(
                f"| {level} | {_cell(code)} | {_link(location(result))} | {_cell(result.get('message', {}).get('text', ''))} |"
            )
        if len(results) > TOP:
            lines.append(f"\n{len(results) - TOP} more in the annotations and the SARIF file.")
    return "\n".join(lines) + "\n\n"


def _link(where: tuple[str, int, int] | None) -> str:
    if where is None:
        return ""
    path, line, _ = where
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace and os.path.isabs(path) and path.startswith(workspace.rstrip("/") + "/"):
        path = path[len(workspace.rstrip("/")) + 1 :]
    text = f"`{_cell(path)}:{line}`"
    server, repository = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    sha = os.environ.get("GITHUB_SHA")
    if not (server and repository and sha) or os.path.isabs(path):
        return text
    return f"[{text}]({server}/{repository}/blob/{sha}/{path.lstrip('./')}#L{line})"


def _cell(text: object) -> str:
    """One table cell: no line breaks, no pipes, no HTML, no Markdown links or images."""
    value = " ".join(str(text).split())
    for char in "\\|<>[]`*_":
        value = value.replace(char, "\\" + char)
    return value


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


if __name__ == "__main__":
    main(*sys.argv[1:4])
