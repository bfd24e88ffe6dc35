"""Benchmark `ddp-doctor check` against torchfix and against a bare ast.parse walk.

Run by hand, not by CI:

    pip install torchfix==0.7.0
    python bench/bench_check.py            # builds bench/corpus/ on first use, then times
    python bench/bench_check.py --rounds 7 --findings

The corpus is real training code shipped inside PyPI packages: the pinned releases below are
fetched with `pip download --no-deps` into bench/corpus/downloads/ (git-ignored), unpacked, and
the files that look like training code (DDP/DataParallel/DistributedSampler/process group plus
a backward() or a train function) are copied into bench/corpus/files/, at most
--per-package from one package, about --files in all. Nothing of it is committed.

Each round runs the three tools once each, in rotating order (interleaved, so drifting machine
load hits all three alike), as separate processes over the same tree; the medians are compared.

The tool is timed as installed: `pip install` compiles the doctor's bytecode, so the timed
processes run without PYTHONDONTWRITEBYTECODE (whatever this shell sets), after one untimed
warm-up run that caches the bytecode under the package's own __pycache__ folders (git-ignored).
One more line times `check` with the doctor's bytecode ignored (every module compiled from
source on each run, as under PYTHONDONTWRITEBYTECODE=1 from a source checkout), so that neither
figure is mistaken for the other. Notebooks are included: every corpus file is also written as
an .ipynb (bench/corpus/notebooks/, rebuilt from the files on each run, a code cell at each
top-level definition), and `check` over those is compared with reading each notebook's JSON and
parsing its joined code cells.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
DOWNLOADS = CORPUS / "downloads"
FILES = CORPUS / "files"
NOTEBOOKS = CORPUS / "notebooks"  # the same files as notebooks, built from FILES on each run

# Pinned so that the corpus (and so the numbers) can be rebuilt exactly.
PACKAGES = (
    "timm==1.0.31",
    "yolov5==7.0.14",
    "ultralytics==8.4.190",
    "torchtune==0.6.1",
    "opacus==1.6.0",
    "fairscale==0.4.13",
    "vissl==0.1.6",
    "classy-vision==0.7.0",
    "accelerate==1.15.0",
    "pytorch-ignite==0.5.5",
    "open_clip_torch==3.3.0",
    "stylegan2-pytorch==1.9.0",
    "byol-pytorch==0.9.1",
    "fairseq==0.12.2",
    "mmengine==0.10.7",
    "mmpretrain==1.2.0",
    "speechbrain==1.1.2",
    "deepspeed==0.19.8",
    "composer==0.32.1",
    "trl==1.16.0",
    "colossalai==0.5.0",
    "diffusers==0.42.1",
    "torchdistill==1.1.5",
)
_DISTRIBUTED = re.compile(
    rb"DistributedDataParallel|DataParallel\(|init_process_group|DistributedSampler"
)
_TRAINING = re.compile(rb"\.backward\(|def train")


def download_packages(
    requirements: tuple[str, ...] = PACKAGES,
    into: Path = DOWNLOADS,
    wheels: frozenset[str] = frozenset(),
    sdists: frozenset[str] = frozenset(),
) -> None:
    """`pip download --no-deps` each pinned release into `into`, once.

    The sdist is preferred (it carries the examples and tools a wheel leaves out). Its metadata
    is prepared without build isolation first (nothing to download or compile), then with it
    (only the build requirements of this one package, as wheels); where both fail, the
    release's wheel is taken. Requirements in `wheels` are fetched as wheels only, those in
    `sdists` as sdists only; for them a download of the other kind does not count.
    """
    into.mkdir(parents=True, exist_ok=True)
    for requirement in requirements:
        name, _, version = requirement.partition("==")
        have = [
            p.name
            for p in into.iterdir()
            if _normal(p.name).startswith(f"{_normal(name)}_{version}")
        ]
        if requirement in wheels:
            have = [n for n in have if n.endswith(".whl")]
        elif requirement in sdists:
            have = [n for n in have if not n.endswith(".whl")]
        if have:
            continue
        print(f"downloading {requirement}", file=sys.stderr)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(into)]
        sdist = [*command, "--no-binary", name, requirement]
        wheel = [*command, "--only-binary", ":all:", requirement]
        tries = [[*sdist, "--no-build-isolation"], sdist, wheel]
        if requirement in wheels:
            tries = [wheel]
        elif requirement in sdists:
            tries = tries[:2]
        for attempt in tries:
            last = attempt is tries[-1]
            stderr = None if last else subprocess.DEVNULL
            if subprocess.run(attempt, check=False, stderr=stderr).returncode == 0:
                break


def _normal(name: str) -> str:
    return name.lower().replace("-", "_")


def build_corpus(wanted: int, per_package: int) -> None:
    download_packages()
    if FILES.exists():
        shutil.rmtree(FILES)
    chosen = 0
    # DOWNLOADS is shared with bench_accuracy.py: take only the releases listed here
    releases = tuple(_normal(r.replace("==", "_")) for r in PACKAGES)
    for archive in sorted(DOWNLOADS.iterdir()):
        if not _normal(archive.name).startswith(releases):
            continue
        package = re.split(r"-\d", archive.name, maxsplit=1)[0]
        taken = 0
        for member, data in sorted(_python_members(archive)):
            if taken >= per_package or chosen >= wanted:
                break
            if _DISTRIBUTED.search(data) and _TRAINING.search(data):
                target = FILES / package / member.split("/", 1)[-1]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                taken += 1
                chosen += 1
    print(f"corpus: {chosen} files in {FILES}", file=sys.stderr)


def _python_members(archive: Path) -> list[tuple[str, bytes]]:
    found = []
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                if name.endswith(".py"):
                    found.append((name, zipped.read(name)))
    elif archive.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive) as tarred:
            for member in tarred.getmembers():
                if member.isfile() and member.name.endswith(".py"):
                    stream = tarred.extractfile(member)
                    if stream is not None:
                        found.append((member.name, stream.read()))
    return found


AST_ONLY = """
import ast, os, sys, warnings
warnings.simplefilter("ignore")
for folder, _, names in os.walk(sys.argv[1]):
    for name in names:
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as stream:
                try:
                    ast.parse(stream.read())
                except (SyntaxError, ValueError):
                    pass
"""


AST_ONLY_NOTEBOOKS = """
import ast, json, os, sys, warnings
warnings.simplefilter("ignore")
for folder, _, names in os.walk(sys.argv[1]):
    for name in names:
        if name.endswith(".ipynb"):
            with open(os.path.join(folder, name), "rb") as stream:
                cells = json.load(stream)["cells"]
            code = [c["source"] for c in cells if c["cell_type"] == "code"]
            try:
                ast.parse("\\n".join("".join(lines) for lines in code))
            except (SyntaxError, ValueError):
                pass
"""


def build_notebooks() -> int:
    """Each corpus file as a notebook (nbformat 4): a new code cell at every top-level def,
    class, decorator or `if __name__` that follows a blank line, a Markdown cell first."""
    if NOTEBOOKS.exists():
        shutil.rmtree(NOTEBOOKS)
    made = 0
    for source in sorted(FILES.rglob("*.py")):
        lines = source.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        cells: list[list[str]] = [[]]
        for number, line in enumerate(lines):
            starts = line.startswith(("def ", "class ", "@", "async def ", "if __name__"))
            if starts and number and not lines[number - 1].strip() and cells[-1]:
                cells.append([])
            cells[-1].append(line)
        notebook = {
            "cells": [{"cell_type": "markdown", "metadata": {}, "source": [f"# {source.name}"]}]
            + [
                {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": []}
                | {"source": cell}
                for cell in cells
            ],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        target = NOTEBOOKS / source.relative_to(FILES).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(notebook), encoding="utf-8")
        made += 1
    return made


# `python -m ddp_doctor ...` with the doctor's cached bytecode ignored and none written: each of
# its modules is compiled from source, as in a checkout run under PYTHONDONTWRITEBYTECODE=1.
# The standard library's and the other packages' bytecode is read as usual.
WITHOUT_DOCTOR_BYTECODE = """
import runpy, sys
from importlib.machinery import SourceFileLoader
sys.dont_write_bytecode = True
read = SourceFileLoader.get_data
def get_data(loader, path):
    if path.endswith(".pyc") and loader.name.partition(".")[0] == "ddp_doctor":
        raise OSError("bytecode ignored")  # the loader compiles the source instead
    return read(loader, path)
SourceFileLoader.get_data = get_data
sys.argv = ["ddp_doctor", *sys.argv[1:]]
runpy.run_module("ddp_doctor", run_name="__main__", alter_sys=True)
"""
UNCACHED = "check, no cached .pyc"
NOTEBOOK_CHECK = "check, as notebooks"
NOTEBOOK_PARSE = "ast.parse, as notebooks"


def child_environment() -> dict[str, str]:
    """This environment less PYTHONDONTWRITEBYTECODE: the doctor runs with its bytecode
    cached, as a pip install leaves it."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def tools(torchfix: str | None) -> dict[str, list[str]]:
    commands = {
        "ddp-doctor check": [sys.executable, "-m", "ddp_doctor", "check", str(FILES)],
        "ast.parse only": [sys.executable, "-c", AST_ONLY, str(FILES)],
    }
    if torchfix:
        commands["torchfix --select ALL"] = [torchfix, "--select", "ALL", str(FILES)]
    commands[UNCACHED] = [sys.executable, "-c", WITHOUT_DOCTOR_BYTECODE, "check", str(FILES)]
    commands[NOTEBOOK_CHECK] = [sys.executable, "-m", "ddp_doctor", "check", str(NOTEBOOKS)]
    commands[NOTEBOOK_PARSE] = [sys.executable, "-c", AST_ONLY_NOTEBOOKS, str(NOTEBOOKS)]
    return commands


def time_once(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        env=child_environment(),
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--per-package", type=int, default=15)
    parser.add_argument("--rebuild", action="store_true", help="rebuild bench/corpus/files")
    parser.add_argument("--findings", action="store_true", help="also print check's findings")
    args = parser.parse_args()

    if args.rebuild or not FILES.exists():
        build_corpus(args.files, args.per_package)
    files = sorted(FILES.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    torchfix = shutil.which("torchfix")
    print(
        f"corpus: {len(files)} files, {lines} lines, {len({p.parts[len(FILES.parts)] for p in files})} packages"
    )
    if torchfix is None:
        print("torchfix not found: pip install torchfix==0.7.0 (comparison skipped)")
    print(f"the same files as {build_notebooks()} notebooks (cells at top-level definitions)")
    print("timed as installed: the doctor's bytecode cached (one untimed warm-up run writes it)")

    commands = tools(torchfix)
    names = list(commands)
    samples: dict[str, list[float]] = {name: [] for name in names}
    # untimed: warms the file cache and the interpreters, and writes the doctor's bytecode
    for name in names:
        time_once(commands[name])
    for round_number in range(args.rounds):
        order = names[round_number % len(names) :] + names[: round_number % len(names)]
        for name in order:
            samples[name].append(time_once(commands[name]))

    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name in names:
        spread = ", ".join(f"{v:.3f}" for v in samples[name])
        print(f"{name:24s} median {medians[name]:7.3f} s   ({spread})")
    check = medians["ddp-doctor check"]
    parse_only = medians["ast.parse only"]
    print(f"check / ast.parse only  = {check / parse_only:.2f}x  (goal: <= 3x; bytecode cached)")
    print(
        f"  without cached .pyc   = {medians[UNCACHED] / parse_only:.2f}x  "
        "(the doctor's modules compiled on every run, as under PYTHONDONTWRITEBYTECODE=1)"
    )
    notebooks = medians[NOTEBOOK_CHECK] / medians[NOTEBOOK_PARSE]
    print(f"notebooks: check / json + ast.parse = {notebooks:.2f}x  (goal: <= 3x)")
    if "torchfix --select ALL" in medians:
        print(
            f"torchfix / check        = {medians['torchfix --select ALL'] / check:.1f}x  (goal: >= 15x)"
        )
    if args.findings:
        subprocess.run(
            [sys.executable, "-m", "ddp_doctor", "check", str(FILES), "--fail-on", "info"]
        )


if __name__ == "__main__":
    main()
