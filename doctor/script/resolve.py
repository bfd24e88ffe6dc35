"""Which functions of the tree a call runs: by name through the file's definitions and its
imports of the tree's modules (project.py); `self.m()` and `super().m()` through the class;
`obj.m()` through the class of the receiver and `main_func(*args)` through what was handed
in, both found by the data flow (values.py); and the functions handed to a call
(`mp.spawn(worker)`, `Process(target=run)`).
"""

from __future__ import annotations

import ast
import os

from ddp_doctor.script import names
from ddp_doctor.script.dispatch import dispatched, is_getattr_call
from ddp_doctor.script.facts import CallSite, ClassInfo, Context, Function, ScriptFacts
from ddp_doctor.script.names import ImportRef
from ddp_doctor.script.project import Project

FOREIGN_ROOTS = frozenset({"torch", "numpy", "os", "sys", "math", "random", "logging", "time"})


class Resolver:
    def __init__(self, project: Project) -> None:
        self.project = project

    def by_name(self, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...] | None:
        func = site.node.func
        project = self.project
        if isinstance(func, ast.Name):
            found = _callable(project, project.definition(facts, func, site.ctx))
            function = site.ctx.function
            if not found and function is not None and func.id in function.params:
                return None  # main_func(*args): a callback, whose value the data flow knows
            return found
        if not isinstance(func, ast.Attribute):
            return dispatched(project, facts, site)  # getattr(module, "init_%s" % x)(...)
        base, method = func.value, func.attr
        text = names.dotted(base)
        if text in ("self", "cls") and site.ctx.class_name:
            cls = facts.classes.get(site.ctx.class_name)
            found = _callable(project, project.method(cls, method) if cls else None)
            return found + self._overrides(cls, method) if cls else found
        if isinstance(base, ast.Call) and names.last_identifier(base.func) == "super":
            cls = facts.classes.get(site.ctx.class_name or "")
            return self._super_method(cls, method) if cls else ()
        if text is not None and (defined := project.definition(facts, func, site.ctx)):
            return _callable(project, defined)  # utils.setup(), Trainer.build()
        if method not in self._reachable_methods(facts):
            return ()
        return None  # obj.method(): the receiver's class decides

    def _reachable_methods(self, facts: ScriptFacts) -> frozenset[str]:
        """Method names of the classes this file defines or imports from the tree: an
        object of another class of the tree is rarely handed to it."""
        cached = facts.__dict__.get("_reachable_methods")
        if cached is None:
            classes = list(facts.classes.values())
            for local, ref in facts.imports.refs.items():
                defined = self.project.top_level(facts, local) if ref.name else None
                if isinstance(defined, ClassInfo):
                    classes.append(defined)
                elif ref.name is None or isinstance(defined, ScriptFacts):
                    module = defined if isinstance(defined, ScriptFacts) else None
                    module = module or self.project.module(facts, ref.module, ref.level)
                    classes += list(module.classes.values()) if module else []
            cached = frozenset(m for c in classes for m in self._inherited(c))
            facts.__dict__["_reachable_methods"] = cached
        return cached

    def _inherited(self, cls: ClassInfo, depth: int = 5) -> set[str]:
        """The method names of a class and of its bases in the tree (`trainer.train()` of
        an LTRTrainer runs BaseTrainer.train)."""
        found = set(cls.methods)
        if depth > 0:
            for parent in self._bases(cls):
                found |= self._inherited(parent, depth - 1)
        return found

    def _bases(self, cls: ClassInfo) -> list[ClassInfo]:
        owner = self.project.owner(next(iter(cls.methods.values()))) if cls.methods else None
        parents = [self.project.resolve(owner, b, Context()) for b in cls.bases] if owner else []
        return [p for p in parents if isinstance(p, ClassInfo) and p is not cls]

    def _overrides(self, cls: ClassInfo, method: str, depth: int = 3) -> tuple[Function, ...]:
        """`self.train_epoch()` in a base class also runs the subclasses' own train_epoch
        (the trainer base class calls the hook its subclass defines)."""
        found: list[Function] = []
        for sub in self._subclasses().get(id(cls), ()) if depth > 0 else ():
            if method in sub.methods:
                found.append(sub.methods[method])
            found += self._overrides(sub, method, depth - 1)
        return tuple(found)

    def _subclasses(self) -> dict[int, list[ClassInfo]]:
        cached = self.__dict__.get("_subclass_map")
        if cached is None:
            cached = self.__dict__["_subclass_map"] = {}
            for facts in list(self.project.files.values()):
                for cls in facts.classes.values():
                    for parent in self._bases(cls) if cls.bases else ():
                        cached.setdefault(id(parent), []).append(cls)
        return cached

    def typed(self, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...]:
        """`obj.method()`: the method of obj's class, when the data flow knows the class."""
        project = self.project
        func = site.node.func
        if isinstance(func, ast.Name):
            return self._callbacks(facts, site)
        assert isinstance(func, ast.Attribute)
        base, method = func.value, func.attr
        classes, foreign = project.values.classes_of(facts, base, site.ctx, site.node)
        if classes:
            return tuple(m for c in classes if (m := project.method(c, method)) is not None)
        if foreign or facts.qualname(func) is not None:
            return ()
        # an untyped receiver: a method of that name in this file's classes
        return tuple(m for c in facts.classes.values() if (m := c.methods.get(method)))

    def _callbacks(self, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...]:
        """`main_func(*args)` where the caller handed `main` over: launch(main, ...)."""
        functions = self.project.functions_by_node
        found = []
        for origin in self.project.values.origins(facts, site.node.func, site.ctx):
            function = functions.get(id(origin.node)) if origin.kind == "definition" else None
            if function is not None:
                found.append(function)
        return tuple(found)

    def _super_method(self, cls: ClassInfo, method: str) -> tuple[Function, ...]:
        owner = self.project.owner(next(iter(cls.methods.values()))) if cls.methods else None
        for base in cls.bases:
            parent = self.project.resolve(owner, base, Context()) if owner else None
            if isinstance(parent, ClassInfo):
                found = self.project.method(parent, method)
                if found is not None:
                    return (found,)
        return ()

    def handed(self, facts: ScriptFacts, site: CallSite) -> tuple[Function, ...]:
        """Functions of the tree passed to a call: mp.spawn(worker), Process(target=run)."""
        found: list[Function] = []
        for value in [*site.node.args, *(kw.value for kw in site.node.keywords)]:
            defined: object = None
            if isinstance(value, ast.Name) and not self.project.may_define(facts, value.id):
                continue
            if isinstance(value, ast.Name):
                defined = self.project.definition(facts, value, site.ctx)
            elif isinstance(value, ast.Attribute) and names.dotted(value.value) == "self":
                cls = facts.classes.get(site.ctx.class_name or "")
                defined = self.project.method(cls, value.attr) if cls else None
            elif isinstance(value, ast.Attribute):
                defined = self.project.definition(facts, value, site.ctx)
            if isinstance(defined, Function):
                found.append(defined)
        return tuple(found)


def imported_names(facts: ScriptFacts) -> frozenset[str]:
    """Names a file imports (a module of the tree not read yet may define them)."""
    cached = facts.__dict__.get("_imported_names")
    if cached is None:
        refs = facts.imports.refs
        cached = frozenset(refs) | frozenset(r.name for r in refs.values() if r.name)
        facts.__dict__["_imported_names"] = cached
    return cached


def sorted_sites(facts: ScriptFacts, defined: frozenset[str]) -> list[tuple[CallSite, bool | None]]:
    """Every call of the file, in order, after a cheap look before resolving it: whether it
    hands over something named like a function of the tree (`mp.spawn(worker)`), or None
    where it cannot reach one (torch.save, x.to(...)). Asked of every call of the tree, so
    the look is written out here rather than made of calls."""
    found: list[tuple[CallSite, bool | None]] = []
    refs, imported = facts.imports.refs, facts.imports.names
    for site in facts.calls:
        node = site.node
        hands = False
        for value in node.args:
            kind = type(value)
            if (kind is _NAME and value.id in defined) or (  # type: ignore[attr-defined]
                kind is _ATTRIBUTE and value.attr in defined  # type: ignore[attr-defined]
            ):
                hands = True
                break
        if not hands:
            for keyword in node.keywords:
                value = keyword.value
                kind = type(value)
                if (kind is _NAME and value.id in defined) or (  # type: ignore[attr-defined]
                    kind is _ATTRIBUTE and value.attr in defined  # type: ignore[attr-defined]
                ):
                    hands = True
                    break
        if (
            hands
            or site.key in defined
            or _names_the_tree(refs, imported, site)
            or (not site.key and is_getattr_call(site))
        ):
            found.append((site, hands))
        else:
            found.append((site, None))
    return found


def _names_the_tree(refs: dict[str, ImportRef], imported: dict[str, str], site: CallSite) -> bool:
    """A callback handed in (`main_func(*args)`), or a call through an import of the
    user's own modules (`utils.setup()`, `from . import dist; dist.init()`); `refs` and
    `imported` are the file's import table's."""
    func = site.node.func
    kind = type(func)
    if kind is _NAME:
        function = site.ctx.function
        if function is not None and func.id in function.params:  # type: ignore[attr-defined]
            return True
    else:
        while kind is _ATTRIBUTE:
            func = func.value  # type: ignore[attr-defined]
            kind = type(func)
        if kind is not _NAME:
            return False
    ref = refs.get(func.id)  # type: ignore[attr-defined]
    if ref is None or (ref.name is not None and not ref.level):
        return False
    return imported.get(func.id, "").split(".")[0] not in FOREIGN_ROOTS  # type: ignore[attr-defined]


_NAME, _ATTRIBUTE = ast.Name, ast.Attribute


def _callable(project: Project, defined: object) -> tuple[Function, ...]:
    if isinstance(defined, Function):
        return (defined,)
    if isinstance(defined, ClassInfo):
        init = project.method(defined, "__init__")
        return (init,) if init is not None else ()
    if isinstance(defined, ScriptFacts):  # `from yolox.core import launch` read as launch.py:
        stem = os.path.splitext(os.path.basename(defined.path))[0]  # its launch() is meant
        return _callable(project, project.top_level(defined, stem, 0))
    return ()
