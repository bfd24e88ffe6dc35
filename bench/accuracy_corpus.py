"""The labelled corpus of bench/check_corpus/manifest.json: load it and lay its files out.

Each manifest entry names one file by its source: a pinned PyPI release (`pypi`), the
distribution file that was labelled (`archive`, an sdist or a wheel) and the member path inside
it (`member`), or a text kept under bench/check_corpus/files/ (`kept`). `fetch_corpus()` downloads the releases with
bench_check.download_packages (pip download --no-deps, into bench/corpus/downloads/), copies
every file to bench/corpus/accuracy/<project>/<path>, and checks its sha256 against the
manifest. Files of one project are laid out together so that a helper module a script
imports sits where the script expects it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bench_check import CORPUS, DOWNLOADS, download_packages

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "check_corpus" / "manifest.json"
KEPT = HERE / "check_corpus" / "files"
TREE = CORPUS / "accuracy"


@dataclass(frozen=True)
class Label:
    code: str
    lines: tuple[int, ...]
    evidence: str
    why: str
    # the same mistake reported in another file of the project: {"path": ..., "line": ...}
    also: tuple[dict[str, object], ...] = ()


@dataclass(frozen=True)
class Entry:
    id: str  # "<project>/<path inside the project>", also its place under TREE
    source: dict[str, str]
    sha256: str
    fire: tuple[Label, ...]
    must_not: tuple[dict[str, object], ...]

    @property
    def project(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def path(self) -> Path:
        return TREE / self.id

    def fires(self, code: str) -> Label | None:
        return next((label for label in self.fire if label.code == code), None)


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    data = json.loads(path.read_text(encoding="utf-8"))
    entries = []
    for item in data["files"]:
        labels = tuple(
            Label(
                label["code"],
                tuple(label["lines"]),
                label["evidence"],
                label["why"],
                tuple(label.get("also", ())),
            )
            for label in item.get("fire", ())
        )
        entries.append(
            Entry(
                item["id"], item["source"], item["sha256"], labels, tuple(item.get("must_not", ()))
            )
        )
    return entries


def fetch_corpus(entries: list[Entry]) -> list[str]:
    """Lay every entry's text out under TREE; return one line per problem (missing, sha256)."""
    sources = [entry.source for entry in entries if "pypi" in entry.source]
    releases = tuple(sorted({source["pypi"] for source in sources}))
    wheels = frozenset(s["pypi"] for s in sources if s.get("archive", "").endswith(".whl"))
    sdists = frozenset(s["pypi"] for s in sources if s.get("archive", ".whl")[-4:] != ".whl")
    download_packages(releases, wheels=wheels, sdists=sdists)
    if TREE.exists():
        shutil.rmtree(TREE)
    archives: dict[str, dict[str, bytes]] = {}
    problems = []
    for entry in entries:
        data = _text_of(entry, archives)
        if data is None:
            problems.append(f"{entry.id}: not found in {entry.source}")
            continue
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            problems.append(f"{entry.id}: sha256 {digest} differs from the manifest's")
            continue
        entry.path.parent.mkdir(parents=True, exist_ok=True)
        entry.path.write_bytes(data)
    return problems


def _text_of(entry: Entry, archives: dict[str, dict[str, bytes]]) -> bytes | None:
    if "kept" in entry.source:
        kept = KEPT / entry.source["kept"]
        return kept.read_bytes() if kept.is_file() else None
    release = entry.source["pypi"]
    if release not in archives:
        archive = find_archive(release, entry.source.get("archive"))
        archives[release] = archive_members(archive) if archive else {}
    return archives[release].get(entry.source["member"])


def find_archive(
    release: str, file_name: str | None = None, downloads: Path = DOWNLOADS
) -> Path | None:
    """The downloaded distribution of a release: `file_name` when given, else the first match."""
    if file_name is not None:
        exact = downloads / file_name
        return exact if exact.is_file() else None
    name, _, version = release.partition("==")
    prefix = f"{name}_{version}".lower().replace("-", "_")
    for archive in sorted(downloads.iterdir()) if downloads.is_dir() else ():
        if archive.name.lower().replace("-", "_").startswith(prefix):
            return archive
    return None


def archive_members(archive: Path) -> dict[str, bytes]:
    """Every regular file of an sdist or wheel by its path inside it (an sdist's top folder,
    `name-version/`, is part of the path)."""
    members: dict[str, bytes] = {}
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                if not name.endswith("/"):
                    members[name] = zipped.read(name)
    else:
        with tarfile.open(archive) as tarred:
            for member in tarred.getmembers():
                stream = tarred.extractfile(member) if member.isfile() else None
                if stream is not None:
                    members[member.name] = stream.read()
    return members
