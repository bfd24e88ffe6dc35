"""The modules of the tree a file's program runs: the file and every module it imports,
directly or through others; by module path, by the name a package's module defines (no
`__init__.py` in view), and through a package's star re-exports."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ddp_doctor.script.facts import ClassInfo, Function, ScriptFacts

if TYPE_CHECKING:
    from ddp_doctor.script.project import Project


def imported_closure(facts: ScriptFacts) -> list[ScriptFacts]:
    """The file and every module of the tree it imports, directly or through others."""
    cached = facts.__dict__.get("_imported_closure")
    if cached is not None:
        return cached
    seen: dict[int, ScriptFacts] = {id(facts): facts}
    todo = [facts]
    while todo:
        current = todo.pop()
        for module in _imported_modules(current):
            if id(module) not in seen:
                seen[id(module)] = module
                todo.append(module)
    closure = facts.__dict__["_imported_closure"] = list(seen.values())
    return closure


# Modules no tree holds (a prefix would also drop torchtitan, osmnx, system_utils...).
_NEVER_IN_THE_TREE = frozenset({"torch", "os", "sys"})


def _imported_modules(facts: ScriptFacts) -> Iterator[ScriptFacts]:
    if not facts.is_python:
        return
    project = facts.project
    for local, ref in facts.imports.refs.items():
        if ref.module.partition(".")[0] in _NEVER_IN_THE_TREE:
            continue
        source = project.module(facts, ref.module, ref.level) if ref.module else None
        if source is not None:
            yield source
        if not ref.name:
            continue
        dotted = f"{ref.module}.{ref.name}" if ref.module else ref.name
        found = project.module(facts, dotted, ref.level)  # `from . import helper`
        if found is None and source is None:
            found = _defining_file(project, project.top_level(facts, local))
        if found is not None:
            yield found
    yield from _star_sources(facts)


def _defining_file(project: Project, definition: object) -> ScriptFacts | None:
    """The file of the tree that defines what an import names: `from .utils import
    setup_basics` with no utils/__init__.py in view finds the module of utils/ that defines
    setup_basics (the program runs it as much as if it had imported that module)."""
    if isinstance(definition, ScriptFacts):
        return definition
    if isinstance(definition, ClassInfo):
        definition = next(iter(definition.methods.values()), None)
        if definition is None:
            return None
    if isinstance(definition, Function):
        try:
            return project.owner(definition)
        except KeyError:
            return None
    return None


def _star_sources(facts: ScriptFacts) -> Iterator[ScriptFacts]:
    """The modules a package's `__init__.py` re-exports whole (`from .gen_utils import *`):
    a name imported from the package may be defined in any of them."""
    if not _has_star_import(facts):
        return
    assert facts.tree is not None
    for statement in facts.tree.body:
        if isinstance(statement, ast.ImportFrom) and any(a.name == "*" for a in statement.names):
            module = statement.module or ""
            if module.partition(".")[0] in _NEVER_IN_THE_TREE:
                continue
            found = facts.project.module(facts, module, statement.level)
            if found is not None:
                yield found


def _has_star_import(facts: ScriptFacts) -> bool:
    cached = facts.__dict__.get("_has_star_import")
    if cached is None:
        cached = facts.tree is not None and "import *" in facts.source
        facts.__dict__["_has_star_import"] = cached
    return cached


def star_definition(project: Project, facts: ScriptFacts, expr: ast.expr) -> object | None:
    """What a called name stands for when the package it is imported from re-exports it with
    a star import (`from .utils import setup` with utils/__init__.py holding `from .gen import
    *`): the function or class of that name in one of the re-exported modules."""
    if isinstance(expr, ast.Name) and expr.id not in facts.imports.refs:
        return _star_imported(project, facts, expr.id)  # `from utils import *` in the file
    package, name = _package_and_name(project, facts, expr)
    if package is None or name is None:
        return None
    for _ in range(2):  # a star re-export of a star re-export
        for module in _star_sources(package):
            found = project.top_level(module, name)
            if found is not None and not isinstance(found, ScriptFacts):
                return found
        following = next(_star_sources(package), None)
        if following is None or os.path.basename(following.path) != "__init__.py":
            break
        package = following
    return None


def _star_imported(project: Project, facts: ScriptFacts, name: str) -> object | None:
    for module in _star_sources(facts):
        found = project.top_level(module, name)
        if found is not None and not isinstance(found, ScriptFacts):
            return found
    return None


def _package_and_name(
    project: Project, facts: ScriptFacts, expr: ast.expr
) -> tuple[ScriptFacts | None, str | None]:
    """(the package `__init__.py`, the name) of `setup` imported from a package, or of
    `utils.setup` with `utils` a package."""
    if isinstance(expr, ast.Name):
        ref = facts.imports.refs.get(expr.id)
        if ref is None or ref.name is None:
            return None, None
        package = project.module(facts, ref.module, ref.level) if ref.module or ref.level else None
        return _init_only(package), ref.name
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        ref = facts.imports.refs.get(expr.value.id)
        if ref is None:
            return None, None
        dotted = f"{ref.module}.{ref.name}" if ref.name and ref.module else ref.name or ref.module
        return _init_only(project.module(facts, dotted, ref.level)), expr.attr
    return None, None


def _init_only(module: ScriptFacts | None) -> ScriptFacts | None:
    """The module when it is a package's `__init__.py` with a star import."""
    if module is None or not _has_star_import(module):
        return None
    return module if os.path.basename(module.path) == "__init__.py" else None
