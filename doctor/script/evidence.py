"""Whether a program runs as several processes: the evidence every rank rule needs first.

A rule about ranks, launch flags or device pinning has no meaning in a one-process script:
`torch.save` on "every rank" of a single-GPU script is one save, a `--local_rank` option of an
evaluation script is a GPU index. Such rules run only on a file whose program shows that it is
distributed. A program is an entry point with the modules of the tree it imports; a file is
judged with every program it belongs to (a helper module is distributed when one of the
programs that import it is). Evidence is:

- a call of the process-group, DDP/FSDP/FSDP2, DeviceMesh/DTensor, DistributedSampler,
  mp.spawn, torch.distributed.elastic or collective APIs, accelerate's Accelerator, a
  Lightning Trainer or Fabric given a strategy, devices or several nodes, DeepSpeed;
- a read of the variables a launcher sets per process (LOCAL_RANK, RANK, WORLD_SIZE);
- a launch line in the tree (shell, SLURM batch, YAML, Makefile, Markdown code block) that
  starts the file with torchrun, torch.distributed.launch/run, `accelerate launch`,
  `deepspeed` or mpirun.

Predicates such as `dist.is_available()` or `dist.is_initialized()` are not evidence: library
helpers ask them in every program, distributed or not. Nor are `torch.cuda.set_device` and
DataParallel: they run in one process.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ddp_doctor.script import names
from ddp_doctor.script.closure import imported_closure
from ddp_doctor.script.facts import Function, ScriptFacts
from ddp_doctor.script.frameworks import configured_trainer, starts_lightning_ranks
from ddp_doctor.script.shellvars import expand_variables
from ddp_doctor.script.textscan import code_lines, logical_lines

if TYPE_CHECKING:
    from ddp_doctor.script.project import Project

# Opinions about what every data-parallel rank does alike: not for RPC programs.
PER_RANK_OPINIONS = frozenset({"DDP119", "DDP122", "DDP127"})
# Rules that judge what runs on which rank, launch flags or per-rank device pinning.
NEEDS_DISTRIBUTED = frozenset(
    {
        "DDP103",
        "DDP104",
        "DDP105",
        "DDP106",
        "DDP107",
        "DDP108",
        "DDP111",
        "DDP112",
        "DDP113",
        "DDP114",
        "DDP115",
        "DDP116",
        "DDP117",
        "DDP118",
        "DDP119",
        "DDP120",
        "DDP121",
        "DDP122",
        "DDP127",
    }
)

_DISTRIBUTED_PREFIXES = (
    "torch.distributed.",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.utils.data.DistributedSampler",
    "torch.multiprocessing.spawn",
    "torch.multiprocessing.start_processes",
    "torch.nn.SyncBatchNorm",
    "deepspeed.initialize",
    "deepspeed.init_distributed",
    "fairscale.nn.",
    "horovod.",
)
_NOT_EVIDENCE = frozenset(
    {
        "torch.distributed.is_available",
        "torch.distributed.is_initialized",
        "torch.distributed.is_nccl_available",
        "torch.distributed.is_gloo_available",
        "torch.distributed.is_mpi_available",
        "torch.distributed.is_torchelastic_launched",
    }
)
# Every evidence call's qualified name holds one of these: a text pre-filter for files without.
_EVIDENCE_WORDS = (
    "distributed",
    "Distributed",
    "spawn",
    "start_processes",
    "SyncBatchNorm",
    "deepspeed",
    "fairscale",
    "horovod",
    "Accelerator",
    "PartialState",
    "notebook_launcher",
    "Trainer",
    "Fabric",
    "detectron2",
    "yolox",
    "fastreid",
)
_FRAMEWORK_CALLS = frozenset(
    {
        "accelerate.Accelerator",
        "accelerate.PartialState",
        "accelerate.notebook_launcher",
        *names.LIBRARY_LAUNCHERS,
    }
)
LAUNCHER_VARIABLES = frozenset({"LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
_LAUNCH_LINE = re.compile(
    r"\btorchrun\b|torch\.distributed\.(?:launch|run)\b|\baccelerate\s+launch\b"
    r"|\bdeepspeed\s|\bmpirun\b|\bsrun\b.*\bpython"
)
_SHELL_PREFIX = re.compile(r"\$\([^)]*\)/|\$\{[^}]*\}/|\$\w+/")
_SCRIPT_NAME = re.compile(r"([\w./-]+\.py)\b")


def runs_distributed(facts: ScriptFacts) -> bool:
    """Whether some program this file belongs to shows that it runs as several processes."""
    cached = facts.__dict__.get("_runs_distributed")
    if cached is None:
        cached = facts.__dict__["_runs_distributed"] = _programs_distributed(facts)
    return cached


def launched_names(lines: Iterable[str]) -> set[str]:
    """File names (no folder) of the scripts that launch lines start with several processes."""
    return {os.path.basename(path) for path in launched_paths(lines)}


def launched_paths(lines: Iterable[str]) -> set[str]:
    """The script paths as launch lines write them, less shell prefixes (`$(dirname "$0")/`,
    `${ROOT}/`, `./`): `tools/train.py`, `train.py`."""
    found: set[str] = set()
    for line in logical_lines(list(lines)):
        if line.lstrip().startswith("#") or not _LAUNCH_LINE.search(line):
            continue
        for written in _SCRIPT_NAME.findall(_SHELL_PREFIX.sub("", line)):
            found.add(written.removeprefix("./").lstrip("/"))
    return found


def note_launchers(project: Project, text_files: Iterable[ScriptFacts]) -> None:
    """Record on the tree which scripts its launch files start (shell, YAML, Makefile...):
    (launch file's folder, the script's path as written). Which of them the deprecated
    torch.distributed.launch starts is launchfiles.py's record."""
    started: set[tuple[str, str]] = set()
    for facts in text_files:
        folder = os.path.dirname(os.path.abspath(facts.path))
        written = expand_variables(facts.path, facts.source.splitlines())
        lines = logical_lines(code_lines(facts.path, written))
        started |= {(folder, p) for p in launched_paths(lines)}
    project.__dict__["_launched"] = frozenset(started)


def launch_names(facts: ScriptFacts, launch_folder: str, written: str) -> bool:
    """A launch line names this file: the written path ends the file's path, and the launch
    file sits in the script's folder, above it or below it (tools/dist_train.sh starting
    tools/train.py; scripts/run.sh starting train.py from the root)."""
    here = os.path.abspath(facts.path)
    if not (here == written or here.endswith(os.sep + written)):
        return False
    return _related(os.path.dirname(here), launch_folder)


def _named_by(facts: ScriptFacts, launches: frozenset[tuple[str, str]]) -> bool:
    return any(launch_names(facts, folder, written) for folder, written in launches)


def _related(one: str, other: str) -> bool:
    return one == other or one.startswith(other + os.sep) or other.startswith(one + os.sep)


def has_own_evidence(facts: ScriptFacts) -> bool:
    cached = facts.__dict__.get("_own_evidence")
    if cached is None:
        cached = facts.__dict__["_own_evidence"] = _own_evidence(facts)
    return cached


def _own_evidence(facts: ScriptFacts) -> bool:
    if not facts.is_python:
        return True  # a launch file is judged by its own (launch-line) rules
    if LAUNCHER_VARIABLES & facts.env_names(writes=False):
        return True
    return calls_distributed_apis(facts) or is_launched(facts)


def calls_distributed_apis(facts: ScriptFacts) -> bool:
    """The file calls an evidence API itself (more than reading the launcher's variables)."""
    if not any(word in facts.source for word in _EVIDENCE_WORDS):
        return False  # no name any evidence call could have
    for site in facts.calls:
        qualified = facts.resolve(site)
        if qualified is None or qualified in _NOT_EVIDENCE:
            continue
        if qualified.startswith(_DISTRIBUTED_PREFIXES) or qualified in _FRAMEWORK_CALLS:
            return True
        if configured_trainer(facts, site, qualified) or starts_lightning_ranks(facts, site):
            return True
    return False


def is_launched(facts: ScriptFacts) -> bool:
    """Whether a launch line of the tree starts this file with several processes."""
    return _named_by(facts, facts.project.__dict__.get("_launched", frozenset()))


def _programs_distributed(facts: ScriptFacts) -> bool:
    """Evidence in this file's own imports, or in a program of the tree that imports it."""
    if not facts.is_python:
        return True
    return id(facts) in _distributed_files(facts.project)


def _distributed_files(project: Project) -> frozenset[int]:
    """Ids of the files that belong to a program with evidence (computed once per tree)."""
    cached = project.__dict__.get("_distributed_files")
    if cached is not None and cached[0] == len(project.files):
        return cached[1]
    found: set[int] = set()
    for program in list(project.files.values()):
        closure = imported_closure(program)
        if any(has_own_evidence(f) for f in closure):
            found.update(id(f) for f in closure)
    result = frozenset(found)
    project.__dict__["_distributed_files"] = (len(project.files), result)
    return result


def shares_a_program(one: ScriptFacts, other: ScriptFacts) -> bool:
    """Whether `other` may run in a program with `one`: both in the closure of an entry point
    of the tree (a script with a `__main__` guard, top-level loops or a launch line). A module
    no entry point imports (a library's data module) may be used by any program of the tree.
    Unrelated scripts in one folder never speak for each other."""
    if one is other:
        return True
    mates = _program_mates(one.project).get(id(one))
    return mates is None or id(other) in mates


def is_entry_point(facts: ScriptFacts) -> bool:
    """A file that is run, not imported: a `__main__` guard, a loop or a call at module level
    under it, or a launch line of the tree that starts it (once per file)."""
    cached = facts.__dict__.get("_entry_point")
    if cached is None:
        cached = facts.__dict__["_entry_point"] = facts.is_python and (
            any(site.ctx.main_guard for site in facts.calls)
            or is_launched(facts)
            or any(loop.ctx is not None and loop.ctx.module_level for loop in facts.loops)
        )
    return cached


def _program_mates(project: Project) -> dict[int, frozenset[int]]:
    """id of each file an entry point imports -> ids of the files of those programs."""
    cached = project.__dict__.get("_program_mates")
    if cached is not None and cached[0] == len(project.files):
        return cached[1]
    mates: dict[int, set[int]] = {}
    for program in list(project.files.values()):
        if not is_entry_point(program):
            continue
        closure = {id(f) for f in imported_closure(program)}
        for member in closure:
            mates.setdefault(member, set()).update(closure)
    frozen = {key: frozenset(value) for key, value in mates.items()}
    project.__dict__["_program_mates"] = (len(project.files), frozen)
    return frozen


def program_files(facts: ScriptFacts) -> list[ScriptFacts]:
    """Every file of the programs this file belongs to (its own imports when no entry point
    of the tree imports it): where a fact about the whole program (LOCAL_RANK read, print
    silenced off rank 0, RPC or tensor parallel set up) may be found."""
    cached = facts.__dict__.get("_program_files")
    if cached is not None:
        return cached
    project = facts.project
    mates = _program_mates(project).get(id(facts))
    if mates is None:
        found = imported_closure(facts)
    else:
        by_id = {id(f): f for f in project.files.values()}
        found = [by_id[i] for i in mates if i in by_id] or [facts]
    facts.__dict__["_program_files"] = found
    return found


def never_runs_in_program(facts: ScriptFacts, function: Function | None) -> bool:
    """A helper module's function (another file of a tree with an entry point imports the
    module) that nothing of the tree calls or names, itself or through its callers, while
    another init of the tree may run (SlowFast's utils/distributed.py `init_process_group(...,
    dist_backend="nccl")`: its programs start the group elsewhere). A module checked alone
    brings the files near it that import it (importers.py) and is judged with them; with none
    in view, or in a tree with no entry point (a library), it is an API: its functions run."""
    if not unused_helper(facts, function):
        return False  # basicsr's init_dist, the only init, may be called from out of view
    return any(
        site.ctx.function is not function and not unused_helper(other, site.ctx.function)
        for other in facts.project.graph.files()
        if other.is_python
        for site in other.calls_to(names.INIT_PROCESS_GROUP)
    )


def unused_helper(facts: ScriptFacts, function: Function | None) -> bool:
    """A function of a module an entry point of the tree imports, that nothing of the tree
    calls or names, itself or through its callers (never an entry point's own function)."""
    if function is None or is_entry_point(facts) or not _imported_in_a_program(facts):
        return False
    graph = facts.project.graph
    reaching = graph.closure([function], up=True)
    tree = [other for other in graph.files() if other.is_python]
    return all(_unreferenced(unit, tree) for unit in reaching)


def called_from_out_of_view(facts: ScriptFacts, function: Function | None) -> bool:
    """A helper module's function (the file is no entry point) that nothing of the tree
    calls or names, itself or through its callers, whether or not the module's importer is
    in view: whoever calls it decides where it runs (a save helper's rank guard). With no
    entry point in view, a file that calls distributed APIs itself (an init, a wrap, a
    collective) is a program's own code, checked alone: its functions run."""
    if function is None or is_entry_point(facts):
        return False
    tree = [other for other in facts.project.graph.files() if other.is_python]
    if not any(is_entry_point(other) for other in tree) and calls_distributed_apis(facts):
        return False  # a script's own distributed code, checked alone: judged as it is
    reaching = facts.project.graph.closure([function], up=True)
    return all(_unreferenced(unit, tree) for unit in reaching)


def _unreferenced(unit: Function, tree: list[ScriptFacts]) -> bool:
    """A plain function whose name the tree's files mention only where it is defined or in
    calls that the call graph places (here or in torch): an import, a registry, `__all__`, a
    docstring or a call nobody could resolve may run it."""
    if not isinstance(unit.node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False  # module-level code runs
    if unit.class_name is not None or unit.decorators:
        return False
    mention = re.compile(rf"\b{re.escape(unit.name)}\b(?!\s*\()")
    if any(unit.name in other.source and mention.search(other.source) for other in tree):
        return False
    return not any(
        not other.project.graph.targets(other, site)
        and not (other.resolve(site) or "").startswith("torch.")
        for other in tree
        for site in other.calls_by_key.get(unit.name, ())
    )


def _imported_in_a_program(facts: ScriptFacts) -> bool:
    if id(facts) in _program_mates(facts.project):
        return True
    tree = [other for other in facts.project.files.values() if other.is_python]
    return any(is_entry_point(other) for other in tree) and any(
        other is not facts and any(module is facts for module in imported_closure(other))
        for other in tree
    )
