"""Measure `ddp-doctor check` against the hand-labelled corpus of real training files.

Run by hand, not by CI:

    python bench/bench_accuracy.py              # every corpus; fetches the PyPI one on first use
    python bench/bench_accuracy.py --no-fetch   # score the trees already laid out
    python bench/bench_accuracy.py --corpus pypi [--json out.json]
    python bench/bench_accuracy.py --corpus github --half A --half C-tune   # parts of SPLIT.md

Every labelled corpus is scored twice: checked per project folder (as users run it) and every
file checked alone. The GitHub corpus (bench/github_corpus/, laid out by `python
bench/github_corpus.py --clones DIR`) is scored per part of its split. Labelled files that are
not laid out are listed as not read, not scored as misses; `check` runs that fail are listed.
Last, the single-process corpus of bench/single_corpus/ (laid out by `python
bench/single_corpus.py --clones DIR`) is checked per project folder; each warning or error
there is printed as a false alarm.

The PyPI corpus is described in bench/check_corpus/manifest.json and README.md beside it: pinned
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
is listed with file:line. Each table's totals are printed twice: every DDP1 code (the corpus
runs with `--select DDP1`), and the default selection, the same findings without the opinion
codes that a plain `ddp-doctor check` leaves out (DDP119, DDP122). The exit code is always 0.
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

from ddp_doctor.script.runner import OPINION_CODES

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
        related = (finding.get("evidence") or {}).get("related") or []  # type: ignore[union-attr]
        causes = [place for place in related if place.get("role") == "cause"]
        if causes:  # reported on the entry point, caused in a helper: scored at the cause
            location = causes[0]
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


def default_selection(outcome: Outcome) -> RuleScore:
    """The totals over the codes a plain `ddp-doctor check` selects (the opinions left out)."""
    total = RuleScore()
    for code, rule in outcome.scores.items():
        if code not in OPINION_CODES:
            total.tp, total.fp, total.fn = (
                total.tp + rule.tp,
                total.fp + rule.fp,
                total.fn + rule.fn,
            )
    return total


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
    default = default_selection(outcome)
    print(
        f"default selection (without the opinions {', '.join(OPINION_CODES)}): "
        f"TP {default.tp}, FP {default.fp}, FN {default.fn}; "
        f"precision {ratio(default.precision)}, recall {ratio(default.recall)}"
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
    if len(present) < len(entries):
        missing = sorted({e.id for e in entries} - {e.id for e in present})
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if missing[10:] else "")
        print(f" (not read: {shown}; python bench/single_corpus.py --clones DIR)")
        print("single-process corpus", end="")
    if not present:
        print(": nothing to check")
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


HALVES = {
    "A": "half A (tuning)",
    "B": "half B (looked at: tuning)",
    "C-tune": "set C, tuning part",
    "C-held": "set C, held out once (seen since: tuning data)",
    "D-tune": "set D, tuning part",
    "D-held": "set D, held out",
    "E-tune": "set E, tuning part",
    "E-held": "set E, held out",
    "F-held": "set F, held out (all of it)",
    "G-held": "set G, held out (all of it)",
    "H-held": "set H, held out (all of it)",
    "I-held": "set I, held out (all of it)",
    "J-held": "set J, held out (all of it)",
    "K-held": "set K, held out (all of it)",
    "L-held": "set L, held out (all of it)",
    "M-held": "set M, held out (all of it)",
    "N-held": "set N, held out (all of it)",
    "O-held": "set O, held out (all of it)",
    "Q-held": "set Q, held out (all of it)",
    "P-held": "set P, held out (all of it)",
    "R-held": "set R, held out (all of it)",
    "S-held": "set S, held out (all of it)",
    "T-held": "set T, held out (all of it)",
    "U-held": "set U, held out (all of it)",
    "V-held": "set V, held out (all of it)",
    "W-held": "set W, held out (all of it)",
    "X-held": "set X, held out (all of it)",
    "Z-held": "set Z, held out (all of it)",
    "Y-held": "set Y, held out (all of it)",
}
# held-out parts not yet measured: scored only when named (--half), never by default
# (E-held to Z-held have each run once: tuning data now)
UNSEEN: tuple[str, ...] = ()


def unread_report(entries: list[Entry], present: list[Entry], corpus: str, hint: str) -> None:
    """Say which labelled files could not be read, instead of scoring them as misses."""
    missing = sorted({entry.id for entry in entries} - {entry.id for entry in present})
    if missing:
        print(f"{corpus}: {len(missing)} labelled files not laid out, not scored ({hint}):")
        for name in missing[:20]:
            print(f"  {name}")
        if missing[20:]:
            print(f"  ... and {len(missing) - 20} more")
        print()


def both_ways(chosen: list[Entry], root: Path, title: str) -> None:
    """Score `chosen` checked per project folder (as users run it), then every file alone."""
    folders = sorted({root / entry.project for entry in chosen})
    report(scored(chosen, folders, root), chosen, f"{title}, checked per folder")
    print("\n")
    alone = scored(chosen, sorted(root / entry.id for entry in chosen), root)
    report(alone, chosen, f"{title}, every file checked alone")
    print("\n")


def github_report(wanted: list[str]) -> None:
    """The GitHub corpus (bench/github_corpus/), each part of the split apart (SPLIT.md)."""
    entries = load_manifest(GITHUB_MANIFEST)
    half_of = halves()
    present = [entry for entry in entries if (GITHUB_TREE / entry.id).is_file()]
    hint = "python bench/github_corpus.py --clones DIR"
    unread_report([e for e in entries if half_of.get(e.id) in wanted], present, "github", hint)
    if not present:
        return
    (GITHUB_TREE / "pyproject.toml").write_text(CORPUS_CONFIG, encoding="utf-8")
    for half in wanted:
        chosen = [entry for entry in present if half_of.get(entry.id) == half]
        if chosen:
            both_ways(chosen, GITHUB_TREE, HALVES[half])


def pypi_report(args: argparse.Namespace) -> Outcome | None:
    """The PyPI corpus (bench/check_corpus/), per folder and per file."""
    entries = load_manifest()
    if args.project:
        entries = [entry for entry in entries if entry.project in args.project]
    if not args.no_fetch:
        for problem in fetch_corpus(entries):
            print(f"pypi: {problem}")
    present = [entry for entry in entries if entry.path.is_file()]
    unread_report(entries, present, "pypi", "run without --no-fetch to download them")
    if not present:
        return None
    (TREE / "pyproject.toml").write_text(CORPUS_CONFIG, encoding="utf-8")
    outcome = scored(present, sorted({TREE / entry.project for entry in present}))
    report(outcome, present, "PyPI corpus, checked per folder, as users run it")
    print("\n")
    alone = scored(present, sorted(TREE / entry.id for entry in present))
    report(alone, present, "PyPI corpus, every file checked alone")
    print("\n")
    return outcome


def write_json(path: Path, outcome: Outcome) -> None:
    scores = {
        code: {"tp": r.tp, "fp": r.fp, "fn": r.fn, "on_line": r.on_line}
        for code, r in sorted(outcome.scores.items())
    }
    document = {
        "scores": scores,
        "false_positives": outcome.false_positives,
        "misses": outcome.misses,
        "elsewhere": outcome.elsewhere,
        "failures": outcome.failures,
    }
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-fetch", action="store_true", help="score the tree already laid out")
    parser.add_argument("--project", action="append", help="only this PyPI project (repeatable)")
    parser.add_argument("--per-file", action="store_true", help="kept for old command lines")
    parser.add_argument(
        "--corpus",
        choices=("pypi", "github", "all"),
        default="all",
        help="pypi: bench/check_corpus; github: bench/github_corpus by part; all (the default)",
    )
    parser.add_argument(
        "--half",
        action="append",
        choices=tuple(HALVES),
        help="github parts to score (repeatable; default every part"
        + (f" but the unseen held-out ones: {', '.join(UNSEEN)}" if UNSEEN else "")
        + ")",
    )
    parser.add_argument("--json", type=Path, help="also write the PyPI scores and lists as JSON")
    args = parser.parse_args()
    if args.corpus in ("pypi", "all"):
        outcome = pypi_report(args)
        if args.json and outcome is not None:
            write_json(args.json, outcome)
    if args.corpus in ("github", "all"):
        github_report(args.half or [half for half in HALVES if half not in UNSEEN])
    single_process_report()


if __name__ == "__main__":
    main()
