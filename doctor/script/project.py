"""The tree being checked: every parsed file, and what a name in one of them is defined as.

Imports are resolved inside the tree only, the way Python would find them with the checked
file's folder (or one of its parents up to the checked root) on sys.path: `from utils.dist
import setup` in train.py finds utils/dist.py beside it; relative imports climb packages. A
file that imports `_init_paths` (the tools/_init_paths.py idiom of HRNet, CvT and their kin,
which puts the tree's `lib` folder on sys.path) also finds its modules in `lib` folders of
those folders: `import _init_paths; from dataset import build_dataloader` in tools/train.py
finds lib/dataset/. A
module imported by a checked file but not itself given to `check` is read for context (its
functions and assignments answer questions), and reported on never. Nothing is imported.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from ddp_doctor.script.facts import ClassInfo, Context, Function, ScriptFacts
from ddp_doctor.script.names import dotted
from ddp_doctor.script.ownpackage import in_own_package

if TYPE_CHECKING:
    from ddp_doctor.script.callgraph import CallGraph
    from ddp_doctor.script.values import Values

# A definition a name can stand for: a function, a class, or a module of the tree.
Definition = Function | ClassInfo | ScriptFacts

_MAX_CONTEXT_FILES = 200  # modules read only for context, per check
_FOREIGN_PACKAGES = frozenset({"torch", "numpy", "os", "typing", "collections", "logging"})
_MAX_HOPS = 4  # re-exports followed (`from .dist import setup` in a package __init__)
_UNKNOWN: Any = object()  # not looked up yet (None is an answer: not in the tree)


_LIB_PATHS = "\0lib"  # marks a folder whose file imports _init_paths (never in a real path)


def _adds_lib_path(facts: ScriptFacts) -> bool:
    """`import _init_paths`: the HRNet idiom whose module puts `../lib` on sys.path."""
    ref = facts.imports.refs.get("_init_paths")
    return ref is not None and ref.name is None and ref.module == "_init_paths"


class Analyses(NamedTuple):
    """What a tree's whole-program answers are built with (script/program.py passes the call
    graph and the data flow): handed in, since both of them read the tree."""

    graph: Callable[[Project], Any]
    values: Callable[[Project], Any]


class Project:
    def __init__(
        self,
        analyses: Analyses,
        roots: Sequence[str] = (),
        load: Callable[[str], ScriptFacts | None] | None = None,
    ) -> None:
        self.analyses = analyses
        self.roots = sorted({os.path.abspath(r) for r in roots}, key=len, reverse=True)
        self.files: dict[str, ScriptFacts] = {}  # absolute path -> facts
        self.context_only: set[str] = set()
        self._load = load
        self._owners: dict[Function, ScriptFacts] = {}
        self._missing: set[str] = set()
        self._modules: dict[tuple[str, str, int], ScriptFacts | None] = {}
        self._listings: dict[str, frozenset[str]] = {}
        self._bases: dict[str, list[str]] = {}
        self._at: dict[tuple[str, str], ScriptFacts | None] = {}
        self._folders: dict[tuple[str, str, int], str | None] = {}
        self._resolved: dict[tuple[int, str, int], Definition | None] = {}
        self._top_level: dict[tuple[int, str, int], Definition | None] = {}

    def add(self, facts: ScriptFacts, *, context_only: bool = False) -> None:
        key = os.path.abspath(facts.path)
        self.files[key] = facts
        if context_only:
            self.context_only.add(key)
        facts.__dict__["_project"] = self
        self._owners[facts.module_unit] = facts
        for function in facts.functions:
            self._owners[function] = facts

    def close(self) -> None:
        """Drop the links between the files, their derived facts and this tree, so that all of
        it is freed at once by reference counting (the cycle collector would scan every
        syntax tree of the check to find it)."""
        for facts in self.files.values():
            for key in ("_project", "_flow", "_samplers", "_program_files", "_imported_closure"):
                facts.__dict__.pop(key, None)
        self.__dict__.pop("graph", None)
        self.__dict__.pop("values", None)
        self.files.clear()
        self._owners.clear()
        self._at.clear()
        self._top_level.clear()

    @property
    def functions_by_node(self) -> dict[int, Function]:
        """Every function of the tree by id of its `def` node (for the data flow's answers)."""
        cached = self.__dict__.get("_by_node")
        if cached is None or cached[0] != len(self._owners):
            table = {id(function.node): function for function in self._owners}
            cached = self.__dict__["_by_node"] = (len(self._owners), table)
        return cached[1]

    def owner(self, function: Function) -> ScriptFacts:
        return self._owners[function]

    @cached_property
    def graph(self) -> CallGraph:
        return self.analyses.graph(self)

    @cached_property
    def values(self) -> Values:
        return self.analyses.values(self)

    @property
    def defined_names(self) -> frozenset[str]:
        """Names of every function and class of the tree (a call by another name reaches
        none of them); recomputed when reading an imported module added files."""
        cached = self.__dict__.get("_defined")
        if cached is None or cached[0] != len(self.files):
            names = frozenset(
                n for f in self.files.values() for n in (*f.functions_by_name, *f.classes)
            )
            cached = self.__dict__["_defined"] = (len(self.files), names)
        return cached[1]

    @cached_property
    def method_names(self) -> frozenset[str]:
        return frozenset(
            m for f in self.files.values() for c in f.classes.values() for m in c.methods
        )

    # modules -------------------------------------------------------------------------------

    def module(self, importer: ScriptFacts, module: str, level: int) -> ScriptFacts | None:
        """The file an import names, when it is in the tree."""
        here = importer.__dict__.get("_folder")
        if here is None:
            here = importer.__dict__["_folder"] = os.path.dirname(os.path.abspath(importer.path))
        if not level and _adds_lib_path(importer):
            here = here + _LIB_PATHS
        key = (here, module, level)
        found = self._modules.get(key, _UNKNOWN)  # asked ~30,000 times: one look when known
        if found is _UNKNOWN:
            found = self._modules[key] = self._find_module(here, module, level)
        return found  # type: ignore[return-value]

    def _find_module(self, here: str, module: str, level: int) -> ScriptFacts | None:
        if level:
            base = here
            for _ in range(level - 1):
                base = os.path.dirname(base)
            return self._file_at(base, module)
        top = module.split(".")[0]
        for base in self._search_bases(here):
            listing = self._listing(base)
            if top not in listing and f"{top}.py" not in listing:
                continue  # torch, numpy, ...: not beside us
            found = self._file_at(base, module)
            if found is not None:
                return found
        return in_own_package(self._search_bases(here), module, self._file_at)

    def _search_bases(self, here: str) -> list[str]:
        """The folder and those above it up to its root (once per folder); with their `lib`
        folders after them for a file that imports `_init_paths` (`here` marked so)."""
        bases = self._bases.get(here)
        if bases is None:
            folder = here.removesuffix(_LIB_PATHS)
            bases = self._folders_up_to_root(folder)
            if folder != here:
                bases = bases + [
                    os.path.join(base, "lib") for base in bases if "lib" in self._listing(base)
                ]
            self._bases[here] = bases
        return bases

    def _folders_up_to_root(self, here: str) -> list[str]:
        root = next((r for r in self.roots if here == r or here.startswith(r + os.sep)), here)
        bases = [here]
        while here != root and len(here) > len(root):
            here = os.path.dirname(here)
            bases.append(here)
        return bases

    def _file_at(self, base: str, module: str) -> ScriptFacts | None:
        """The module's file under `base`, read for context when the tree has not (once per
        base and module: asked for every import, in every folder up to the root)."""
        key = (base, module)
        found = self._at.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._at[key] = self._find_file_at(base, module)
        return found  # type: ignore[return-value]

    def _find_file_at(self, base: str, module: str) -> ScriptFacts | None:
        path = os.path.join(base, *module.split(".")) if module else base
        for candidate in (path + ".py", os.path.join(path, "__init__.py")):
            found = self.files.get(candidate)
            if found is None and self._listed(candidate):
                found = self._read_for_context(candidate)
            if found is not None:
                return found
        return None

    def _listed(self, path: str) -> bool:
        """Whether the file exists, from one listing per folder (imports of torch, numpy and
        the like are looked up in every folder up to the root)."""
        folder, name = os.path.split(path)
        return name in self._listing(folder)

    def _listing(self, folder: str) -> frozenset[str]:
        listing = self._listings.get(folder)
        if listing is not None:
            return listing
        parent, name = os.path.split(folder)
        if parent != folder and name not in self._listing(parent):
            listing = frozenset()  # base/torch/nn when base/torch is not there
        else:
            try:
                listing = frozenset(os.listdir(folder))
            except OSError:
                listing = frozenset()
        self._listings[folder] = listing
        return listing

    def _read_for_context(self, path: str) -> ScriptFacts | None:
        if self._load is None or path in self._missing:
            return None
        if len(self.context_only) >= _MAX_CONTEXT_FILES or not os.path.isfile(path):
            self._missing.add(path)
            return None
        facts = self._load(path)
        if facts is None:
            self._missing.add(path)
            return None
        self.add(facts, context_only=True)
        return facts

    # names -----------------------------------------------------------------------------------

    def definition(self, facts: ScriptFacts, expr: ast.AST, ctx: Context) -> Definition | None:
        """What a name or dotted name in `facts` is defined as, if the tree defines it."""
        text = dotted(expr)
        return self.resolve(facts, text, ctx) if text is not None else None

    def resolve(self, facts: ScriptFacts, text: str, ctx: Context) -> Definition | None:
        key = (id(facts), text, id(ctx.function))
        found = self._resolved.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._resolved[key] = self._resolve(facts, text, ctx)
        return found  # type: ignore[return-value]

    def _resolve(self, facts: ScriptFacts, text: str, ctx: Context) -> Definition | None:
        root, *rest = text.split(".")
        if not self.may_define(facts, root):
            return None
        found = self._local(facts, root, ctx)
        ref = facts.imports.refs.get(root)
        if found is None and rest and ref is not None and ref.name is None and ref.module == root:
            for cut in range(len(rest), 0, -1):  # import utils.dist; utils.dist.setup()
                module = self.module(facts, ".".join([root, *rest[:cut]]), 0)
                if module is not None:
                    found, rest = module, rest[cut:]
                    break
        if found is None and rest and ref is not None and ref.name is not None:
            # from tape import utils (a folder with no __init__.py); utils.setup_loader()
            package = f"{ref.module}.{ref.name}" if ref.module else ref.name
            folder = self._package_folder(facts, package, ref.level)
            if folder is not None:
                found, rest = self._folder_member(folder, rest[0]), rest[1:]
        for part in rest:
            if found is None:
                return None
            found = self.member(found, part)
        return found

    @staticmethod
    def may_define(facts: ScriptFacts, name: str) -> bool:
        """A cheap first look: the name is a def, a class or an import of the file."""
        return (
            name in facts.functions_by_name or name in facts.classes or name in facts.imports.refs
        )

    def _local(self, facts: ScriptFacts, name: str, ctx: Context) -> Definition | None:
        function = ctx.function
        while function is not None:
            nested = facts.functions_by_qualname.get(f"{function.qualname}.{name}")
            if nested is not None:
                return nested
            function = self.enclosing(facts, function)
        return self.top_level(facts, name)

    def top_level(self, facts: ScriptFacts, name: str, hops: int = _MAX_HOPS) -> Definition | None:
        """What a module-level name of the file is (its imports followed `hops` deep): asked
        three times per answer on a tree, looked up once (the modules it reads are too)."""
        key = (id(facts), name, hops)
        found = self._top_level.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._top_level[key] = self._find_top_level(facts, name, hops)
        return found  # type: ignore[no-any-return]

    def _find_top_level(self, facts: ScriptFacts, name: str, hops: int) -> Definition | None:
        top = facts.functions_by_qualname.get(name)
        if top is not None and top.class_name is None:
            return top
        if name in facts.classes:
            return facts.classes[name]
        ref = facts.imports.refs.get(name)
        if ref is None or hops <= 0:
            return None
        if ref.name is None:  # import utils.dist as d / import utils
            return self.module(facts, ref.module, ref.level)
        source = self.module(facts, ref.module, ref.level)
        if source is None:  # a package folder without (or not given) its __init__.py
            return self._in_package(facts, ref.module, ref.name, ref.level)
        found = self.top_level(source, ref.name, hops - 1)
        if found is None and os.path.basename(source.path) == "__init__.py":
            found = self._file_at(os.path.dirname(os.path.abspath(source.path)), ref.name)
        return found

    def _in_package(
        self, facts: ScriptFacts, package: str, name: str, level: int
    ) -> Definition | None:
        """`from denoiser import distrib` with denoiser/distrib.py; `from recbole.config
        import Config` with Config defined in one module of recbole/config/."""
        submodule = self.module(facts, f"{package}.{name}" if package else name, level)
        if submodule is not None:
            return submodule
        folder = self._package_folder(facts, package, level)
        return self._folder_member(folder, name) if folder is not None else None

    def _folder_member(self, folder: str, name: str) -> Definition | None:
        """A module of a package folder, or a function or class one of its modules defines."""
        module = self._file_at(folder, name)
        if module is not None:
            return module
        for entry in sorted(self._listing(folder)):
            if entry.endswith(".py") and entry != "__init__.py":
                module = self._file_at(folder, entry[:-3])
                if module is not None and (
                    name in module.classes or name in module.functions_by_qualname
                ):
                    return self.top_level(module, name, 0)
        return None

    def _package_folder(self, facts: ScriptFacts, package: str, level: int) -> str | None:
        here = facts.__dict__.get("_folder") or os.path.dirname(os.path.abspath(facts.path))
        if not level and _adds_lib_path(facts):
            here = here + _LIB_PATHS
        key = (here, package, level)
        if key not in self._folders:
            self._folders[key] = self._find_folder(here, package, level)
        return self._folders[key]

    def _find_folder(self, here: str, package: str, level: int) -> str | None:
        if package.split(".")[0] in _FOREIGN_PACKAGES:
            return None
        parts = package.split(".") if package else []
        if level:
            for _ in range(level - 1):
                here = os.path.dirname(here)
            bases = [here]
        else:
            bases = self._search_bases(here)
        for base in bases:
            folder = os.path.join(base, *parts)
            parent, last = os.path.split(folder)
            if last in self._listing(parent) and os.path.isdir(folder):
                return folder
        return None

    def member(self, definition: Definition, name: str) -> Definition | None:
        if isinstance(definition, ScriptFacts):
            found = self.top_level(definition, name)
            if found is None and os.path.basename(definition.path) == "__init__.py":
                found = self._file_at(os.path.dirname(os.path.abspath(definition.path)), name)
            return found
        if isinstance(definition, ClassInfo):
            return self.method(definition, name)
        return None

    def method(self, cls: ClassInfo, name: str, depth: int = 5) -> Function | None:
        """A method of a class of the tree, looked up through its bases in the tree."""
        found = cls.methods.get(name)
        if found is not None or depth <= 0:
            return found
        owner = self._class_owner(cls)
        for base in cls.bases:
            if owner is None:
                break
            parent = self.resolve(owner, base, Context())
            if isinstance(parent, ClassInfo) and parent is not cls:
                found = self.method(parent, name, depth - 1)
                if found is not None:
                    return found
        return None

    def _class_owner(self, cls: ClassInfo) -> ScriptFacts | None:
        for function in cls.methods.values():
            return self._owners.get(function)
        return next((f for f in self.files.values() if f.classes.get(cls.name) is cls), None)

    def class_named(self, facts: ScriptFacts, name: str) -> ClassInfo | None:
        found = self.top_level(facts, name)
        return found if isinstance(found, ClassInfo) else None

    def enclosing(self, facts: ScriptFacts, function: Function) -> Function | None:
        outer = function.qualname.rpartition(".")[0]
        while outer:
            found = facts.functions_by_qualname.get(outer)
            if found is not None:
                return found
            outer = outer.rpartition(".")[0]  # a class between: Trainer.fit.step -> Trainer
        return None
