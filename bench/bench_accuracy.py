"""Measure `ddp-doctor check` against the hand-labelled corpus of real training files.

Run by hand, not by CI:

    python bench/bench_accuracy.py              # fetches the corpus on first use, then scores
    python bench/bench_accuracy.py --no-fetch   # score the tree already under bench/corpus/accuracy
    python bench/bench_accuracy.py --json out.json
    python bench/bench_accuracy.py --per-file   # also every labelled file checked alone
    python bench/bench_accuracy.py --corpus github [--per-file]   # bench/github_corpus by half

After the labelled corpus, the single-process corpus of bench/single_corpus/ (laid out by
`python bench/single_corpus.py --clones DIR`) is checked per project folder; each warning or
error there is printed as a false alarm.

The corpus is described in bench/check_corpus/manifest.json and README.md beside it: pinned
PyPI releases are downloaded (pip download --no-deps), the labelled files are copied to
bench/corpus/accuracy/<project>/<path> and their sha256 checked. `check --format json` then runs
once per project folder, so a helper module a script imports is part of the same tree.

Scoring is per (file, code). A labelled code counts as a true positive when the rule fires
anywhere in that file, or at one of the label's `also` places in another file of the project;
it is a miss otherwise. A code that fires in a file where it is not labelled is one false
positive for that (file, code), with all its lines listed. Findings within +-2 lines of a
labelled line are reported as "on the line"; the others as "elsewhere in the file".
A finding that `check` reports on an entry point for a cause in a helper module (evidence
`related`) is scored at the helper's line, where the label sits. Every miss and false positive
is listed with file:line. The exit code is always 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from accuracy_corpus import TREE, Entry, fetch_corpus, load_manifest
from github_corpus import MANIFEST as GITHUB_MANIFEST
from github_corpus import TREE as GITHUB_TREE
from github_corpus import halves
from single_corpus import TREE as SINGLE_TREE
from single_corpus import load_single

NEAR = 2  # a finding this many lines from a labelled line counts as on it
CHECK_TIMEOUT_S = 600
# Stops check's search for a [tool.ddp-doctor] table at the corpus root, so that no
# pyproject.toml of the repository around it changes what is selected.
CORPUS_CONFIG = '[tool.ddp-doctor]\nselect = ["DDP1"]\n'


@dataclass
class RuleScore:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    on_line: int = 0  # true positives with a finding on (or near) a labelled line

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


@dataclass
class Outcome:
    scores: dict[str, RuleScore] = field(default_factory=lambda: defaultdict(RuleScore))
    false_positives: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    unlabelled_findings: int = 0
    failures: list[str] = field(default_factory=list)


def run_check(project: Path, root: Path = TREE) -> tuple[list[dict[str, object]], str | None]:
    """Findings of `check` over one project folder (or one file), paths relative to `root`;
    or why not."""
    command = [sys.executable, "-m", "ddp_doctor", "check", "--format", "json"]
    command += ["--select", "DDP1", project.relative_to(root).as_posix()]
    try:
        done = subprocess.run(
            command, cwd=root, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return [], f"check timed out after {CHECK_TIMEOUT_S} s"
    if done.returncode not in (0, 1):
        lines = (done.stderr or done.stdout).strip().splitlines()
        return [], f"check exited {done.returncode}: {lines[-1] if lines else 'no output'}"
    try:
        return json.loads(done.stdout)["findings"], None
    except (json.JSONDecodeError, KeyError) as error:
        return [], f"check printed no report ({error})"


def findings_by_place(findings: list[dict[str, object]]) -> dict[tuple[str, str], list[int]]:
    """(path relative to TREE, code) -> the lines it fired on."""
    places: dict[tuple[str, str], list[int]] = defaultdict(list)
    for finding in findings:
        location = finding.get("location") or {}
        related = (finding.get("evidence") or {}).get("related")  # type: ignore[union-attr]
        if related:  # reported on the entry point, caused in a helper: scored at the cause
            location = related[0]
        path = location.get("path")  # type: ignore[union-attr]
        if not path:
            continue
        relative = Path(path).as_posix().removeprefix("./")
        places[(relative, str(finding["code"]))].append(int(location.get("line") or 0))  # type: ignore[union-attr]
    return places


def score(entries: list[Entry], places: dict[tuple[str, str], list[int]]) -> Outcome:
    outcome = Outcome()
    claimed: set[tuple[str, str, int]] = set()  # findings consumed by a label's `also` place
    for entry in entries:
        for label in entry.fire:
            rule = outcome.scores[label.code]
            own = places.get((entry.id, label.code), [])
            also_hits = [
                (f"{entry.project}/{place['path']}", int(place["line"]))
                for place in label.also
                for line in places.get((f"{entry.project}/{place['path']}", label.code), [])
                if abs(line - int(place["line"])) <= NEAR
            ]
            for path, line in also_hits:
                claimed.update(
                    (path, label.code, found)
                    for found in places.get((path, label.code), [])
                    if abs(found - line) <= NEAR
                )
            if not own and not also_hits:
                rule.fn += 1
                where = ",".join(map(str, label.lines))
                outcome.misses.append(f"{label.code} {entry.id}:{where}  {label.why}")
                continue
            rule.tp += 1
            if also_hits or any(abs(f - n) <= NEAR for f in own for n in label.lines):
                rule.on_line += 1
            else:
                where = ",".join(map(str, sorted(own)))
                outcome.elsewhere.append(
                    f"{label.code} {entry.id}: fired at {where}, labelled at "
                    f"{','.join(map(str, label.lines))}"
                )
    labelled = {(entry.id, label.code) for entry in entries for label in entry.fire}
    known = {entry.id for entry in entries}
    for (path, code), lines in sorted(places.items()):
        if path not in known:
            outcome.unlabelled_findings += len(lines)
            continue
        if (path, code) in labelled:
            continue
        unclaimed = sorted(line for line in lines if (path, code, line) not in claimed)
        if unclaimed:
            outcome.scores[code].fp += 1
            outcome.false_positives.append(f"{code} {path}:{','.join(map(str, unclaimed))}")
    return outcome


def ratio(value: float | None) -> str:
    return "   -" if value is None else f"{value:.2f}"


def report(outcome: Outcome, entries: list[Entry], title: str) -> None:
    labels = sum(len(entry.fire) for entry in entries)
    projects = len({entry.project for entry in entries})
    print(f"corpus: {len(entries)} files from {projects} projects, {labels} labels; {title}")
    print()
    print(f"{'rule':8s} {'TP':>4s} {'FP':>4s} {'FN':>4s} {'precision':>10s} {'recall':>7s}")
    total = RuleScore()
    for code in sorted(outcome.scores):
        rule = outcome.scores[code]
        total.tp, total.fp, total.fn = total.tp + rule.tp, total.fp + rule.fp, total.fn + rule.fn
        total.on_line += rule.on_line
        print(
            f"{code:8s} {rule.tp:4d} {rule.fp:4d} {rule.fn:4d} "
            f"{ratio(rule.precision):>10s} {ratio(rule.recall):>7s}"
        )
    print()
    print(
        f"overall (micro): TP {total.tp}, FP {total.fp}, FN {total.fn}; "
        f"precision {ratio(total.precision)}, recall {ratio(total.recall)}"
    )
    weak = [
        c
        for c, r in sorted(outcome.scores.items())
        if r.precision is not None and r.precision < 0.9
    ]
    print(f"rules with precision under 0.90: {', '.join(weak) if weak else 'none'}")
    print(f"true positives on (+-{NEAR}) a labelled line: {total.on_line} of {total.tp}")
    for title, items in (
        ("false positives", outcome.false_positives),
        ("misses", outcome.misses),
        ("true positives elsewhere in the file", outcome.elsewhere),
        ("check failures", outcome.failures),
    ):
        if items:
            print(f"\n{title} ({len(items)}):")
            for item in items:
                print(f"  {item}")
    if outcome.unlabelled_findings:
        print(f"\nfindings in files outside the manifest: {outcome.unlabelled_findings}")


def scored(entries: list[Entry], targets: list[Path], root: Path = TREE) -> Outcome:
    """Scores of one `check` run per target (a project folder, or a file alone)."""
    places: dict[tuple[str, str], list[int]] = defaultdict(list)
    failures = []
    for target in targets:
        findings, failure = run_check(target, root)
        if failure:
            failures.append(f"{target.relative_to(root)}: {failure}")
        for place, lines in findings_by_place(findings).items():
            places[place].extend(lines)
    outcome = score(entries, places)
    outcome.failures = failures
    return outcome


def single_process_report() -> None:
    """Warnings and errors on the single-process corpus: every one is a false alarm."""
    entries = load_single()
    present = [entry for entry in entries if (SINGLE_TREE / entry.id).is_file()]
    print(f"\nsingle-process corpus: {len(present)} of {len(entries)} files laid out", end="")
    if not present:
        print(" (python bench/single_corpus.py --clones DIR lays them out)")
        return
    (SINGLE_TREE / "pyproject.toml").write_text(CORPUS_CONFIG, encoding="utf-8")
    alarms, infos = [], 0
    for project in sorted({entry.project for entry in present}):
        findings, failure = run_check(SINGLE_TREE / project, SINGLE_TREE)
        if failure:
            alarms.append(f"{project}: {failure}")
        for finding in findings:
            if finding.get("severity") in ("warning", "error"):
                where = finding.get("location") or {}
                alarms.append(
                    f"{finding['code']} {where.get('path')}:{where.get('line')}"  # type: ignore[union-attr]
                )
            else:
                infos += 1
    print(f"; false alarms (warnings and errors): {len(alarms)}; infos: {infos}")
    for alarm in alarms:
        print(f"  {alarm}")


def github_report(per_file: bool) -> None:
    """The GitHub corpus (bench/github_corpus/), each half of the split apart: half A may
    have been used to tune the rules, half B is held out."""
    entries = load_manifest(GITHUB_MANIFEST)
    half_of = halves()
    (GITHUB_TREE / "pyproject.toml").write_text(CORPUS_CONFIG, encoding="utf-8")
    present = [entry for entry in entries if (GITHUB_TREE / entry.id).is_file()]
    if not present:
        print("github corpus: not laid out (python bench/github_corpus.py --clones DIR)")
        return
    for half, title in (("A", "half A (tuning)"), ("B", "half B (held out)")):
        chosen = [entry for entry in present if half_of.get(entry.id) == half]
        folders = sorted({GITHUB_TREE / entry.project for entry in chosen})
        report(scored(chosen, folders, GITHUB_TREE), chosen, f"{title}, checked per folder")
        print("\n")
        if per_file:
            alone = scored(chosen, sorted(GITHUB_TREE / e.id for e in chosen), GITHUB_TREE)
            report(alone, chosen, f"{title}, every file checked alone")
            print("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-fetch", action="store_true", help="score the tree already laid out")
    parser.add_argument("--project", action="append", help="only this project (repeatable)")
    parser.add_argument(
        "--per-file", action="store_true", help="also check every labelled file alone and score it"
    )
    parser.add_argument(
        "--corpus",
        choices=("pypi", "github"),
        default="pypi",
        help="pypi: bench/check_corpus (the default); github: bench/github_corpus by half",
    )
    parser.add_argument("--json", type=Path, help="also write the scores and lists as JSON here")
    args = parser.parse_args()
    if args.corpus == "github":
        github_report(args.per_file)
        single_process_report()
        return

    entries = load_manifest()
    if args.project:
        entries = [entry for entry in entries if entry.project in args.project]
    if not args.no_fetch:
        for problem in fetch_corpus(entries):
            print(f"corpus: {problem}", file=sys.stderr)
    (TREE / "pyproject.toml").write_text(CORPUS_CONFIG, encoding="utf-8")
    present = [entry for entry in entries if entry.path.is_file()]
    if len(present) < len(entries):
        print(f"corpus: {len(entries) - len(present)} labelled files are missing", file=sys.stderr)

    folders = sorted({TREE / entry.project for entry in present})
    outcome = scored(present, folders)
    report(outcome, present, "checked per folder, as users run it")
    if args.per_file:
        print("\n")
        alone = scored(present, sorted(TREE / entry.id for entry in present))
        report(alone, present, "every file checked alone")
    single_process_report()
    if args.json:
        scores = {
            code: {"tp": r.tp, "fp": r.fp, "fn": r.fn, "on_line": r.on_line}
            for code, r in sorted(outcome.scores.items())
        }
        args.json.write_text(
            json.dumps(
                {
                    "scores": scores,
                    "false_positives": outcome.false_positives,
                    "misses": outcome.misses,
                    "elsewhere": outcome.elsewhere,
                    "failures": outcome.failures,
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
