"""A tree to check, with its whole-program analyses: the one place that builds a Project.

The call graph and the data flow each read the tree and ask each other questions through it
(`project.graph`, `project.values`); the project is handed how to build them, so that neither
project.py nor the two analyses import one another in a circle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from ddp_doctor.script.callgraph import CallGraph
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.project import Analyses, Project
from ddp_doctor.script.values import Values

ANALYSES = Analyses(graph=CallGraph, values=Values)


def new_project(
    roots: Sequence[str] = (), load: Callable[[str], ScriptFacts | None] | None = None
) -> Project:
    """An empty tree under `roots`; modules it imports are read with `load`."""
    return Project(ANALYSES, roots, load)


def project_of(
    files: Sequence[ScriptFacts],
    roots: Sequence[str] = (),
    load: Callable[[str], ScriptFacts | None] | None = None,
) -> Project:
    """A tree of `files` (their folders are its roots unless `roots` are given)."""
    folders = roots or [os.path.dirname(os.path.abspath(f.path)) for f in files]
    project = new_project(folders, load)
    for facts in files:
        project.add(facts)
    return project
