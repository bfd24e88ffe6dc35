"""What one pass over a script's AST records: calls, assignments, loops, functions, in context.

The walker (walker.py) fills a `ScriptFacts`; rules only read it, so no rule walks the tree
again. Every recorded node carries the `Context` it was met in: the enclosing function, the
loops around it, the branches it sits in (each `if` arm and early exit on the way), the
innermost rank guard (`if rank == 0:`), whether a branch condition says the code runs only in
a distributed launch or only without one, and a few flags.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from ddp_doctor.script.names import ImportTable, dotted

if TYPE_CHECKING:
    from ddp_doctor.script.project import Project

# Polarity of a rank guard: the branch runs only on rank 0, or only on the other ranks.
ZERO = "zero"
NONZERO = "nonzero"


@dataclass(frozen=True)
class RankGuard:
    polarity: str  # ZERO or NONZERO
    node: ast.AST  # the `if` (or early return) that makes it


# What a branch condition says about the launch: `if args.distributed:` / `else:`.
DISTRIBUTED = "distributed"
SINGLE = "single"


@dataclass(frozen=True)
class Branch:
    """One arm of a condition: the `if` (or conditional expression, or early exit) and which
    way it went. Two contexts whose branches hold the same node with different arms never run
    in the same pass."""

    node: ast.AST
    arm: bool


@dataclass(frozen=True, eq=False)  # compared and hashed by identity
class Function:
    name: str
    qualname: str  # "Trainer.train"
    class_name: str | None
    node: ast.FunctionDef | ast.AsyncFunctionDef
    params: tuple[str, ...]
    decorators: tuple[str, ...]  # last identifiers of the decorator expressions


@dataclass(frozen=True, eq=False)
class Loop:
    node: ast.For | ast.AsyncFor | ast.While
    target: str | None  # `epoch` in `for epoch in ...`, dotted text or None
    iterates: str | None  # dotted text of the iterable (`loader`, `self.train_data`), if plain
    ctx: Context | None = None  # where the loop statement itself is


class Context(NamedTuple):  # a tuple: made for every branch and loop of every file
    function: Function | None = None
    class_name: str | None = None
    loops: tuple[Loop, ...] = ()
    guard: RankGuard | None = None
    main_guard: bool = False  # under `if __name__ == "__main__":`
    no_grad: bool = False  # under `with torch.no_grad()` / `inference_mode()`
    branches: tuple[Branch, ...] = ()  # outermost first
    launch: str | None = None  # DISTRIBUTED or SINGLE, from the innermost telling condition

    @property
    def module_level(self) -> bool:
        return self.function is None and self.class_name is None

    def excludes(self, other: Context) -> bool:
        """Whether the two places sit in different arms of one condition."""
        if not self.branches or not other.branches:
            return False
        arms = {id(b.node): b.arm for b in self.branches}
        return any(arms.get(id(b.node), b.arm) != b.arm for b in other.branches)

    def within(self, other: Context) -> bool:
        """Whether every branch of `other` is taken here too: code at `other` that runs runs
        whenever this place runs (ignoring loops and exceptions)."""
        mine = {(id(b.node), b.arm) for b in self.branches}
        return all((id(b.node), b.arm) in mine for b in other.branches)


MODULE = Context()


@dataclass(frozen=True, eq=False)  # compared and hashed by identity
class CallSite:
    node: ast.Call
    ctx: Context
    key: str  # last name of what is called, after import aliases: "DistributedDataParallel"

    @property
    def receiver(self) -> ast.expr | None:
        """`sampler` in `sampler.set_epoch(e)`."""
        func = self.node.func
        return func.value if isinstance(func, ast.Attribute) else None

    def keyword(self, name: str) -> ast.expr | None:
        for kw in self.node.keywords:
            if kw.arg == name:
                return kw.value
        return None

    def argument(self, position: int, name: str) -> ast.expr | None:
        """A parameter passed by keyword or at `position`, as the callee declares it."""
        found = self.keyword(name)
        if found is not None:
            return found
        args = self.node.args
        if position < len(args) and not any(
            isinstance(a, ast.Starred) for a in args[: position + 1]
        ):
            return args[position]
        return None


@dataclass(frozen=True, eq=False)
class Assignment:
    target: str  # access path: "model", "self.model", "cfg['model']"
    value: ast.expr
    node: ast.stmt | ast.expr
    ctx: Context
    index: tuple[int, ...] = ()  # where the target sits in an unpacking: (1,) for b in a, b = ...
    element: bool = False  # a loop variable: one element of `value` (the iterable) at a time


@dataclass(frozen=True, eq=False)  # compared and hashed by identity
class ClassInfo:
    name: str
    node: ast.ClassDef
    bases: tuple[str, ...]  # dotted texts of the base expressions
    methods: dict[str, Function]


@dataclass(frozen=True)
class EnvAccess:
    """`os.environ["NAME"]` read or written, `os.environ.get("NAME")`, `os.getenv("NAME")`."""

    name: str
    node: ast.AST
    ctx: Context
    writes: bool
    value: ast.expr | None = None  # what a write stores


@dataclass(frozen=True)
class TorchImport:
    node: ast.Import | ast.ImportFrom
    ctx: Context


@dataclass
class ScriptFacts:
    path: str
    source: str
    tree: ast.Module | None  # None for a text file (shell, yaml, markdown)
    imports: ImportTable = field(default_factory=ImportTable)
    calls: list[CallSite] = field(default_factory=list)
    assignments: list[Assignment] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    returns: dict[str, list[ast.expr]] = field(default_factory=lambda: defaultdict(list))
    return_contexts: dict[int, Context] = field(default_factory=dict)  # id(returned value)
    env: list[EnvAccess] = field(default_factory=list)
    strings: list[ast.Constant] = field(default_factory=list)  # ones that look relevant
    torch_imports: list[TorchImport] = field(default_factory=list)
    classes: dict[str, ClassInfo] = field(default_factory=dict)  # module-level classes by name
    asserts: list[tuple[ast.Assert, Context]] = field(default_factory=list)
    print_overridden: bool = False  # `builtins.print = ...` (silences print off rank 0)

    @property
    def is_python(self) -> bool:
        return self.tree is not None

    @property
    def project(self) -> Project:
        """The tree this file was checked with (script/program.py attaches every file it reads)."""
        found = self.__dict__.get("_project")
        if found is None:
            raise LookupError(f"{self.path} was not read as part of a project")
        return found

    @cached_property
    def module_unit(self) -> Function:
        """Module-level code, as a function of the call graph."""
        node = self.tree if self.tree is not None else ast.Module(body=[], type_ignores=[])
        return Function("<module>", "<module>", None, node, (), ())  # type: ignore[arg-type]

    @cached_property
    def lines(self) -> list[str]:
        return self.source.splitlines()

    @cached_property
    def site_of(self) -> dict[int, CallSite]:
        return {id(site.node): site for site in self.calls}

    @cached_property
    def calls_by_key(self) -> dict[str, list[CallSite]]:
        index: dict[str, list[CallSite]] = defaultdict(list)
        for call in self.calls:
            index[call.key].append(call)
        return index

    def calls_to(self, *qualnames: str) -> list[CallSite]:
        """Calls whose callee resolves, through the imports, to one of `qualnames`."""
        found: list[CallSite] = []
        for key in {q.rsplit(".", 1)[-1] for q in qualnames}:
            found.extend(c for c in self.calls_by_key.get(key, ()) if self.resolve(c) in qualnames)
        return sorted(found, key=position)

    def methods_called(self, name: str) -> list[CallSite]:
        """`x.name(...)` calls on any receiver (methods we cannot resolve by type)."""
        return [c for c in self.calls_by_key.get(name, ()) if c.receiver is not None]

    def resolve(self, call: CallSite) -> str | None:
        return self.qualname(call.node.func)

    def qualname(self, node: ast.AST) -> str | None:
        """What a dotted expression names through the imports (remembered per node)."""
        known = self._qualnames
        key = id(node)
        if key in known:
            return known[key]
        found = known[key] = self.imports.resolve(node)
        return found

    @cached_property
    def _qualnames(self) -> dict[int, str | None]:
        return {}

    @cached_property
    def assignments_by_target(self) -> dict[str, list[Assignment]]:
        index: dict[str, list[Assignment]] = defaultdict(list)
        for assignment in self.assignments:
            index[assignment.target].append(assignment)
        return index

    @cached_property
    def assignment_of_value(self) -> dict[int, Assignment]:
        return {id(a.value): a for a in self.assignments if not a.element}

    def assigned_to(self, node: ast.AST) -> str | None:
        """The target a value is assigned to: `sampler` for `sampler = DistributedSampler(ds)`."""
        found = self.assignment_of_value.get(id(node))
        return found.target if found else None

    @cached_property
    def functions_by_name(self) -> dict[str, list[Function]]:
        index: dict[str, list[Function]] = defaultdict(list)
        for function in self.functions:
            index[function.name].append(function)
        return index

    @cached_property
    def functions_by_qualname(self) -> dict[str, Function]:
        return {function.qualname: function for function in self.functions}

    def env_names(self, *, writes: bool | None = None) -> set[str]:
        return {e.name for e in self.env if writes is None or e.writes == writes}

    def mentions(self, text: str) -> bool:
        return text in self.source


def position(item: CallSite | Assignment | ast.AST) -> tuple[int, int]:
    node = item if isinstance(item, ast.AST) else item.node
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def same_function(a: Context, b: Context) -> bool:
    return a.function is b.function


def text_of(node: ast.AST | None) -> str:
    """A short source-like text for messages: dotted names as is, anything else unparsed."""
    if node is None:
        return ""
    plain = dotted(node)
    if plain is not None:
        return plain
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."
