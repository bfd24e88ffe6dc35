"""`check` as a pure function: paths and options in, findings and counts out (no printing)."""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddp_doctor.model import Finding
from ddp_doctor.registry import RuleSpec, Selector
from ddp_doctor.script.analyze import (
    judge,
    load_for_context,
    prepare,
    prepare_notebook,
    script_rules,
    unreadable,
)
from ddp_doctor.script.chains import helper_findings
from ddp_doctor.script.config import Config, ConfigFinder
from ddp_doctor.script.evidence import note_launchers
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.files import (
    NOTEBOOK,
    Candidate,
    Excluded,
    Unreadable,
    discover,
    launch_scripts_beside,
    read_text,
)
from ddp_doctor.script.ignore import IgnoreRules
from ddp_doctor.script.importers import HOPS as IMPORTER_HOPS
from ddp_doctor.script.importers import (
    group_starters_beside,
    importers_of,
    is_helper_module,
)
from ddp_doctor.script.launchfiles import note_legacy_scripts
from ddp_doctor.script.notebook import NotebookScript, in_cells, notebook_script
from ddp_doctor.script.program import new_project, project_of

if TYPE_CHECKING:
    from ddp_doctor.script.project import Project

_DOCTOR_PREFIX = "DDP9"
# Opinions, not mistakes: selectable (--select DDP119, --select ALL, or any select that names
# them or their prefix) but left out of the default selection, as ruff leaves its
# opinionated rules out of its default set.
OPINION_CODES = ("DDP119", "DDP122")


@dataclass(frozen=True)
class CheckOptions:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass
class CheckOutcome:
    findings: list[Finding] = field(default_factory=list)
    checked: int = 0  # files read and analysed
    skipped: int = 0  # files or paths that could not be checked
    excluded: int = 0  # files named on the command line that the user's excludes match


def check_paths(paths: Sequence[str], options: CheckOptions = CheckOptions()) -> CheckOutcome:
    """Checks every file under `paths`. Raises ConfigError for an unusable [tool.ddp-doctor].

    Every file is read and walked first, then judged: a rule may follow a call into another
    file of the tree (an import of the user's own module)."""
    collecting = gc.isenabled()
    gc.disable()  # every tree stays alive until judged: the cycle collector would rescan them
    try:
        return _check_paths(paths, options)
    finally:
        if collecting:
            gc.enable()


def _check_paths(paths: Sequence[str], options: CheckOptions) -> CheckOutcome:
    configs = ConfigFinder()
    excludes = _excludes(paths, options, configs)
    outcome = CheckOutcome()
    selections = _Selections(options)
    project = new_project(_roots(paths), load=load_for_context)
    prepared: list[tuple[Candidate, ScriptFacts]] = []
    notebooks: dict[str, NotebookScript] = {}
    for found in discover(list(paths), excludes):
        if isinstance(found, Excluded):
            outcome.excluded += 1
            continue
        if isinstance(found, Unreadable):
            outcome.skipped += 1
            outcome.findings.append(unreadable(found.path, found.reason))
            continue
        facts = _prepare_file(found, outcome, notebooks)
        if facts is not None:
            if facts.is_python:
                project.add(facts)
            else:  # launch lines of a shell script or Makefile: a tree of their own
                project_of([facts])
            prepared.append((found, facts))
    _add_importers(project, paths, prepared, excludes)
    launch_files = [facts for _, facts in prepared if not facts.is_python]
    launch_files += _scripts_beside(paths, prepared, excludes)
    note_launchers(project, launch_files)
    note_legacy_scripts(project, launch_files)
    try:
        for found, facts in prepared:
            rules = selections.rules_for(found.path, configs.for_file(found.path))
            outcome.findings.extend(judge(facts, rules))

        def judge_helper(helper: ScriptFacts) -> list[Finding]:
            return judge(helper, selections.rules_for(helper.path, configs.for_file(helper.path)))

        outcome.findings.extend(helper_findings([f for _, f in prepared], judge_helper))
    finally:
        project.close()
    outcome.findings = [f for f in outcome.findings if selections.keeps(f, configs)]
    for path, script in notebooks.items():
        outcome.findings = in_cells(outcome.findings, path, script)
    outcome.findings.sort(key=_order)
    return outcome


def _scripts_beside(
    paths: Sequence[str], prepared: list[tuple[Candidate, ScriptFacts]], excludes: IgnoreRules
) -> list[ScriptFacts]:
    """The launch scripts beside the Python files named on their own (not given, so neither
    checked nor reported on): what starts a file counts as its launch evidence."""
    named = {os.path.normpath(p) for p in paths if not os.path.isdir(p)}
    alone = [found.path for found, facts in prepared if facts.is_python and found.path in named]
    given = {os.path.abspath(found.path) for found, _ in prepared}
    return [
        ScriptFacts(path=script.path, source=text, tree=None)
        for script, text in launch_scripts_beside(alone, excludes)
        if os.path.abspath(script.path) not in given
    ]


def _add_importers(
    project: Project,
    paths: Sequence[str],
    prepared: list[tuple[Candidate, ScriptFacts]],
    excludes: IgnoreRules,
) -> None:
    """The files that import a helper module named on its own, read for context
    (importers.py): its callers decide what its functions leave to them."""
    named = {os.path.normpath(p) for p in paths if not os.path.isdir(p)}
    frontier = [
        facts
        for found, facts in prepared
        if facts.is_python and found.path in named and is_helper_module(facts.source)
    ]
    for helper in frontier:  # the package's other group starters, beside it: context only
        for path in group_starters_beside(helper.path, helper.source, excludes):
            _add_context(project, path)
    for _ in range(IMPORTER_HOPS):
        loaded = []
        for helper in frontier:
            for path in importers_of(helper.path, _root_of(project, helper.path), excludes):
                context = _add_context(project, path)
                if context is not None:
                    loaded.append(context)
        frontier = [facts for facts in loaded if is_helper_module(facts.source)]


def _add_context(project: Project, path: str) -> ScriptFacts | None:
    """Read a file for context only (never reported on), unless the project has it."""
    if os.path.abspath(path) in project.files:
        return None
    context = load_for_context(path)
    if context is not None:
        project.add(context, context_only=True)
    return context


def _root_of(project: Project, path: str) -> str:
    here = os.path.dirname(os.path.abspath(path))
    return next((r for r in project.roots if here == r or here.startswith(r + os.sep)), here)


def _prepare_file(
    candidate: Candidate, outcome: CheckOutcome, notebooks: dict[str, NotebookScript]
) -> ScriptFacts | None:
    text = read_text(candidate)
    if isinstance(text, Unreadable):
        outcome.skipped += 1
        outcome.findings.append(unreadable(text.path, text.reason))
        return None
    if candidate.kind == NOTEBOOK:
        script = notebook_script(text)
        if isinstance(script, str):
            outcome.skipped += 1
            outcome.findings.append(unreadable(candidate.path, script))
            return None
        outcome.checked += 1
        prepared, notebooks[candidate.path], left_out = prepare_notebook(candidate.path, script)
        outcome.findings.extend(left_out)
    else:
        outcome.checked += 1
        prepared = prepare(candidate.path, text, candidate.kind)
    if isinstance(prepared, Finding):
        outcome.findings.append(prepared)
        return None
    return prepared


def _roots(paths: Sequence[str]) -> list[str]:
    """Where imports are looked up: each folder given, and for a file given the working
    folder when the file is under it (`python pkg/eval/linear.py` from the repository, or a
    pre-commit hook naming changed files: `import pkg.distributed` is found there), else the
    file's folder."""
    here = os.getcwd()
    roots: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            roots.append(path)
            continue
        folder = os.path.dirname(os.path.abspath(path))
        under_cwd = folder == here or folder.startswith(here.rstrip(os.sep) + os.sep)
        roots.append(here if under_cwd and here != os.sep else folder)
    return roots


def _excludes(paths: Sequence[str], options: CheckOptions, configs: ConfigFinder) -> IgnoreRules:
    rules = IgnoreRules.defaults(os.getcwd())
    rules = rules.plus(IgnoreRules.of(list(options.exclude), os.getcwd()))
    roots: set[str] = set()
    for path in paths:
        folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        config = configs.for_folder(os.path.abspath(folder))
        if config.root is not None and config.root not in roots:
            roots.add(config.root)
            rules = rules.plus(IgnoreRules.of(list(config.exclude), config.root))
    return rules


class _Selections:
    """CLI --select replaces the config's select; ignores add up; per-file-ignores on top."""

    def __init__(self, options: CheckOptions) -> None:
        self.options = options
        self._rules: dict[tuple[tuple[str, ...], tuple[str, ...]], list[RuleSpec]] = {}
        self._all = script_rules()

    def selector(self, path: str, config: Config) -> Selector:
        select = self.options.select or config.select
        ignore = (*config.ignore, *config.ignores_for(path), *self.options.ignore)
        if not select:
            ignore = (*OPINION_CODES, *ignore)
        return Selector(_split(select), _split(ignore))

    def rules_for(self, path: str, config: Config) -> list[RuleSpec]:
        selector = self.selector(path, config)
        key = (selector.select, selector.ignore)
        if key not in self._rules:
            self._rules[key] = [
                spec
                for spec in self._all
                if selector.allows(spec.code) or spec.code.startswith(_DOCTOR_PREFIX)
            ]
        return self._rules[key]

    def keeps(self, finding: Finding, configs: ConfigFinder) -> bool:
        path = finding.location.path if finding.location else ""
        selector = self.selector(path, configs.for_file(path))
        if finding.code.startswith(_DOCTOR_PREFIX):  # can't-check notes ignore --select
            return Selector((), selector.ignore).allows(finding.code)
        return selector.allows(finding.code)


def _split(entries: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part.strip() for e in entries for part in e.split(",") if part.strip())


def _order(finding: Finding) -> tuple[str, int, int, int, str]:
    where = finding.location
    if where is None:
        return ("", 0, 0, 0, finding.code)
    return (where.path, where.cell or 0, where.line or 0, where.column or 0, finding.code)
