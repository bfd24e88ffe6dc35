"""The labelled GitHub corpus of bench/github_corpus/manifest.json: lay its files out from
local git clones into bench/corpus/github/<project>/<path> (git-ignored), checking each sha256.

    python bench/github_corpus.py --clones DIR   # DIR/<owner>+<name> or DIR/<owner>/<name>

The labels are read by accuracy_corpus.load_manifest (the same format as check_corpus, with
`source` naming repository, path and commit, and `half` saying which half of the split).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from single_corpus import GIT_TIMEOUT_S, git_dir

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "github_corpus" / "manifest.json"
TREE = HERE / "corpus" / "github"


def halves(path: Path = MANIFEST) -> dict[str, str]:
    """File id -> "A" (tuning) or "B" (held out)."""
    return {item["id"]: item["half"] for item in json.loads(path.read_text("utf-8"))["files"]}


def lay_out(clones: Path, path: Path = MANIFEST) -> list[str]:
    problems = []
    for item in json.loads(path.read_text(encoding="utf-8"))["files"]:
        source = item["source"]
        where = git_dir(clones, source["repository"])
        if where is None:
            problems.append(f"{item['id']}: no clone of {source['repository']} under {clones}")
            continue
        try:
            done = subprocess.run(
                ["git", f"--git-dir={where}", "show", f"{source['commit']}:{source['path']}"],
                capture_output=True,
                timeout=GIT_TIMEOUT_S,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            problems.append(f"{item['id']}: {error}")
            continue
        if hashlib.sha256(done.stdout).hexdigest() != item["sha256"]:
            problems.append(f"{item['id']}: sha256 differs from the labelled text")
            continue
        target = TREE / item["id"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(done.stdout)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clones", type=Path, required=True, help="folder of git clones")
    problems = lay_out(parser.parse_args().clones)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
