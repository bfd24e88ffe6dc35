"""The single-process corpus of bench/single_corpus/manifest.json: real files that run in one
process (training, evaluation, data preparation, utility modules, notebooks exported to .py),
each labelled "no warning or error" before `check` ran on it.

No file text is committed (public-repository code stays out of the project): the manifest
names every file by repository, path and commit, with the sha256 of the text that was
labelled. `lay_out(clones)` copies each file out of a local clone of its repository into
bench/corpus/single_process/<id> (git-ignored) and checks the sha256; a notebook is exported
the way `jupyter nbconvert --to script` does in substance: its code cells in order, joined
by blank lines, magics and shell escapes commented out.

    python bench/single_corpus.py --clones DIR   # DIR/<owner>+<name> or DIR/<owner>/<name>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "single_corpus" / "manifest.json"
TREE = HERE / "corpus" / "single_process"
GIT_TIMEOUT_S = 60


@dataclass(frozen=True)
class SingleEntry:
    id: str  # "<project>/<path>", also its place under TREE
    repository: str
    path: str
    commit: str
    sha256: str
    kind: str

    @property
    def project(self) -> str:
        return self.id.split("/", 1)[0]


def load_single(path: Path = MANIFEST) -> list[SingleEntry]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        SingleEntry(
            item["id"],
            item["repository"],
            item["path"],
            item["commit"],
            item["sha256"],
            item["kind"],
        )
        for item in data["files"]
    ]


def git_dir(clones: Path, repository: str) -> Path | None:
    owner, name = repository.split("/", 1)
    for base in (clones / f"{owner}+{name}", clones / owner / name):
        for candidate in (base, base / ".git", base / "repo", base / "repo" / ".git"):
            if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
                return candidate
    return None


def file_text(clones: Path, entry: SingleEntry) -> bytes:
    where = git_dir(clones, entry.repository)
    if where is None:
        raise FileNotFoundError(f"no clone of {entry.repository} under {clones}")
    blob = f"{entry.commit}:{entry.path}"
    done = subprocess.run(
        ["git", f"--git-dir={where}", "show", blob],
        capture_output=True,
        timeout=GIT_TIMEOUT_S,
        check=True,
    )
    return export_notebook(done.stdout) if entry.path.endswith(".ipynb") else done.stdout


def export_notebook(raw: bytes) -> bytes:
    """A notebook's code cells as one script, cells in order."""
    cells = json.loads(raw.decode("utf-8")).get("cells", [])
    parts = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        lines = [
            f"# {line}" if line.lstrip().startswith(("%", "!")) else line
            for line in text.splitlines()
        ]
        parts.append("\n".join(lines))
    return ("\n\n\n".join(parts) + "\n").encode("utf-8")


def lay_out(clones: Path, entries: list[SingleEntry]) -> list[str]:
    """Copy every file under TREE; the problems found (a missing clone, a changed text)."""
    problems = []
    for entry in entries:
        try:
            text = file_text(clones, entry)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            problems.append(f"{entry.id}: {error}")
            continue
        if hashlib.sha256(text).hexdigest() != entry.sha256:
            problems.append(f"{entry.id}: sha256 differs from the labelled text")
            continue
        target = TREE / entry.id
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clones", type=Path, required=True, help="folder of git clones")
    args = parser.parse_args()
    problems = lay_out(args.clones, load_single())
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
