"""Measure `ddp-doctor logs` against the hand-labelled corpus in fixtures/logs/corpus.

Run by hand (not by CI):  python bench/bench_logs_accuracy.py [--corpus DIR]

Every NAME.log has a NAME.label written before the tool ever saw the log (see the corpus
README for the rules). For each log this runs `ddp-doctor logs NAME.log --format json` and
prints the label next to the codes the tool found (the first one is what the tool calls the
root cause), then:

- top-1: the first finding is the labelled root cause. A log labelled `none` counts right when
  the tool names no error-severity code outside the label's `also` list; an `unlabelled` log is
  always a miss (no code describes its cause).
- any-position: the root cause is among the findings (`none` as for top-1).
- wrong names: the first finding is a code other than the labelled root cause, or (for `none`
  and `unlabelled` logs) an error-severity code outside `also`, or any finding is a code the
  label lists under `absent`.

A corpus folder may hold `split.json` ({"projects": {"owner/repo": "A" | "B"}, ...}): then
`--half A|B` measures only the logs of that half's projects (the label's `source` names the
project). Labels may carry `family:`; the summary then gives top-1, wrong and nothing (no
finding at all on a log whose label names a code) per family. `--summary-only` prints no
per-log rows (for the half that is not tuned on).

Labels may name a code by its name (`name:tensors-on-different-devices`); names are resolved
through `ddp-doctor rules --format json`, and a name not (yet) in the table is a miss.
Always exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "corpus"
TIMEOUT_S = 120


@dataclass(frozen=True)
class Label:
    source: str
    root: str
    family: str = "-"  # a code, "none", "unlabelled: ...", or "name:..." before resolution
    also: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str


@dataclass
class Verdict:
    name: str
    label: Label
    root_code: str | None  # resolved code, None for none/unlabelled/unknown names
    findings: list[Finding]
    error: str | None = None
    wrong: list[str] = field(default_factory=list)
    top1: bool = False
    anywhere: bool = False


def doctor_command() -> list[str] | None:
    """How to start the doctor: this Python's module, else the console script on PATH."""
    if importlib.util.find_spec("ddp_doctor") is not None:
        return [sys.executable, "-m", "ddp_doctor"]
    script = shutil.which("ddp-doctor")
    return [script] if script else None


def read_label(path: Path) -> Label:
    fields: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return Label(
        source=fields.get("source", "?"),
        root=fields.get("root_cause", "unlabelled: no root_cause line"),
        family=fields.get("family", "-"),
        also=tuple(fields.get("also", "").split()),
        absent=tuple(fields.get("absent", "").split()),
    )


def code_names(doctor: list[str]) -> dict[str, str]:
    """name -> code from the doctor's own code table."""
    done = subprocess.run(
        [*doctor, "rules", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    try:
        return {row["name"]: row["code"] for row in json.loads(done.stdout)}
    except (json.JSONDecodeError, KeyError, TypeError):
        print(f"warning: could not read the code table ({done.stderr.strip()[:200]})")
        return {}


def resolve(token: str, names: dict[str, str]) -> str | None:
    """A code as the tool reports it; None for none/unlabelled and names the table lacks."""
    if token.startswith("name:"):
        return names.get(token.removeprefix("name:"))
    if token == "none" or token.startswith("unlabelled"):
        return None
    return token


def run_doctor(doctor: list[str], log: Path) -> tuple[list[Finding], str | None]:
    try:
        done = subprocess.run(
            [*doctor, "logs", str(log), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [], f"timed out after {TIMEOUT_S} s"
    try:
        report = json.loads(done.stdout)
        return [Finding(f["code"], f["severity"]) for f in report["findings"]], None
    except (json.JSONDecodeError, KeyError, TypeError):
        return [], f"exit {done.returncode}: {done.stderr.strip()[:200]}"


def judge(verdict: Verdict, names: dict[str, str]) -> None:
    label, findings = verdict.label, verdict.findings
    codes = [f.code for f in findings]
    accepted = {resolve(token, names) for token in label.also}
    causes = [f.code for f in findings if f.severity == "error" and f.code not in accepted]
    if label.root == "none":
        verdict.top1 = verdict.anywhere = not causes
    elif verdict.root_code is not None:
        verdict.top1 = bool(codes) and codes[0] == verdict.root_code
        verdict.anywhere = verdict.root_code in codes
    if verdict.root_code is not None:
        if codes and codes[0] != verdict.root_code:
            verdict.wrong.append(f"first finding {codes[0]}, label {verdict.root_code}")
    elif label.root.startswith("name:"):
        if codes:
            verdict.wrong.append(f"first finding {codes[0]}, label {label.root} (not in table)")
    elif causes:
        verdict.wrong.append(f"names {' '.join(causes)} where the label has no code")
    for token in label.absent:
        code = resolve(token, names)
        if code in codes:
            verdict.wrong.append(f"names {code}, which the label says is absent")


def label_text(verdict: Verdict) -> str:
    root = verdict.label.root
    if root.startswith("unlabelled"):
        return "unlabelled"
    if root.startswith("name:"):
        return f"{root.removeprefix('name:')}={verdict.root_code or '?'}"
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--half", choices=("A", "B"), help="only this half of split.json")
    parser.add_argument("--summary-only", action="store_true", help="no per-log rows")
    args = parser.parse_args()
    doctor = doctor_command()
    if doctor is None:
        print("ddp-doctor is neither importable by this Python nor on PATH; nothing measured")
        return
    logs = sorted(args.corpus.glob("*.log"))
    if not logs:
        print(f"no *.log in {args.corpus}")
        return
    names = code_names(doctor)
    halves = read_split(args.corpus) if args.half else {}
    verdicts = []
    for log in logs:
        label_path = log.with_suffix(".label")
        if not label_path.exists():
            print(f"{log.name}: no label, skipped")
            continue
        label = read_label(label_path)
        if args.half and halves.get(project_of(label.source)) != args.half:
            continue
        findings, error = run_doctor(doctor, log)
        verdict = Verdict(log.stem, label, resolve(label.root, names), findings, error)
        judge(verdict, names)
        verdicts.append(verdict)
        if not args.summary_only:
            print_row(verdict)
    if args.half:
        print(f"half {args.half} of {args.corpus.name}/split.json")
    print_summary(verdicts, details=not args.summary_only)
    print_families(verdicts)


def print_row(verdict: Verdict) -> None:
    found = " ".join(f.code for f in verdict.findings) or "-"
    mark = "ok " if verdict.top1 else ("any" if verdict.anywhere else "MISS")
    print(f"{mark:4s} {verdict.name:48s} label {label_text(verdict):38s} tool {found}")
    if verdict.error:
        print(f"     doctor failed: {verdict.error}")
    for reason in verdict.wrong:
        print(f"     WRONG NAME: {reason}")


def read_split(corpus: Path) -> dict[str, str]:
    """owner/repo -> "A" | "B" from the corpus's split.json ({} when there is none)."""
    try:
        return dict(json.loads((corpus / "split.json").read_text(encoding="utf-8"))["projects"])
    except (OSError, ValueError, KeyError, TypeError):
        print(f"warning: no readable split.json in {corpus}; --half selects nothing")
        return {}


def project_of(source: str) -> str:
    """`https://... (owner/repo#12)` -> owner/repo."""
    start, hash_at = source.rfind("("), source.rfind("#")
    return source[start + 1 : hash_at] if 0 <= start < hash_at else source


def print_families(verdicts: list[Verdict]) -> None:
    families = sorted({v.label.family for v in verdicts})
    if families == ["-"]:
        return
    print()
    print(f"{'family':14s} {'logs':>5s} {'top-1':>7s} {'wrong':>6s} {'nothing':>8s}")
    for family in families:
        group = [v for v in verdicts if v.label.family == family]
        top1 = sum(v.top1 for v in group)
        wrong = sum(bool(v.wrong) for v in group)
        nothing = sum(1 for v in group if not v.findings and v.root_code is not None)
        share = 100 * top1 / len(group)
        print(f"{family:14s} {len(group):5d} {top1:3d} {share:3.0f}% {wrong:6d} {nothing:8d}")


def print_summary(verdicts: list[Verdict], details: bool = True) -> None:
    total = len(verdicts)
    if not total:
        return
    top1 = sum(v.top1 for v in verdicts)
    anywhere = sum(v.anywhere for v in verdicts)
    wrong = [v for v in verdicts if v.wrong]
    print()
    print(f"logs: {total}")
    print(f"top-1 accuracy:        {top1}/{total} = {100 * top1 / total:.1f}%")
    print(f"any-position accuracy: {anywhere}/{total} = {100 * anywhere / total:.1f}%")
    print(f"logs with wrong names: {len(wrong)}")
    if not details:
        return
    for verdict in wrong:
        print(f"  {verdict.name}: {'; '.join(verdict.wrong)}")
    misses = [v for v in verdicts if not v.top1]
    print(f"top-1 misses: {len(misses)}")
    for verdict in misses:
        found = " ".join(f.code for f in verdict.findings) or "nothing"
        print(f"  {verdict.name}: label {label_text(verdict)}, tool {found}")


if __name__ == "__main__":
    main()
