"""Which launch scripts start a Python file with the deprecated torch.distributed.launch.

DDP103 fires, whatever the program reads, when a launch file starts the script with
torch.distributed.launch: that launcher passes `--local-rank=N` since torch 2.0, and a parser
that knows only `--local_rank` exits before LOCAL_RANK is read. A launch file is a shell or
SLURM script, a YAML file or a Makefile of the tree; a Markdown or RST document's code block
shows how the authors ran it once (DDP102 reports the deprecated launcher there), and says
nothing about the torch the user runs it under, so it is no launch file here. A file checked
on its own brings the small shell and SLURM scripts beside it that name it
and in a `scripts` folder beside it (files.launch_scripts_beside): `bash distributed_train.sh 8`
is how it is run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ddp_doctor.script.evidence import launch_names, launched_paths
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.shellvars import expand_variables
from ddp_doctor.script.textscan import DOCUMENT_SUFFIXES, launch_mentions, logical_lines

if TYPE_CHECKING:
    from ddp_doctor.script.project import Project

_RECORD = "_legacy_launch_scripts"


def note_legacy_scripts(project: Project, text_files: Iterable[ScriptFacts]) -> None:
    """Record on the tree the scripts that its launch files (documents left out) start with
    torch.distributed.launch: (launch file's folder, the script's path as written, the launch
    file's path as shown)."""
    started: set[tuple[str, str, str]] = set()
    for facts in text_files:
        if facts.is_python or facts.path.lower().endswith(DOCUMENT_SUFFIXES):
            continue
        folder = os.path.dirname(os.path.abspath(facts.path))
        lines = logical_lines(expand_variables(facts.path, facts.source.splitlines()))
        legacy = [lines[n - 1] for n, _, _ in launch_mentions(lines, skip_comments=True)]
        started |= {(folder, written, facts.path) for written in launched_paths(legacy)}
    project.__dict__[_RECORD] = frozenset(started)


def legacy_launch_file(facts: ScriptFacts) -> str | None:
    """The launch file of the tree that starts this file with torch.distributed.launch, if
    any: the written path ends the file's path, and the launch file sits in the file's folder,
    above it or below it (tools/dist_train.sh starting tools/train.py, scripts/run.sh starting
    train.py from the root)."""
    launches: frozenset[tuple[str, str, str]] = facts.project.__dict__.get(_RECORD, frozenset())
    if not launches:
        return None
    found = sorted(
        shown for folder, written, shown in launches if launch_names(facts, folder, written)
    )
    return found[0] if found else None
