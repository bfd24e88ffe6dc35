"""The installed package's import graph, built from the source: no cycle anywhere (imports
inside functions count; `if TYPE_CHECKING:` blocks do not), the patient imports nothing of the
doctor, and doctor/'s top level stays small."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {  # import name -> folder, as pyproject's package-dir maps them
    "ddp_doctor": ROOT / "doctor",
    "ddp_doctor.probes": ROOT / "probes",
    "ddp_doctor.patient": ROOT / "patient",
}
TOP_LEVEL_LIMIT = 18


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def _known(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            known = _known(target, modules)
            if known and known != name:
                yield known


@functools.cache  # one parse of the tree for every test here
def import_graph() -> dict[str, frozenset[str]]:
    modules = module_files()
    return {
        name: frozenset(imported_modules(name, path, modules)) for name, path in modules.items()
    }


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_imports_inside_functions() -> None:
    graph = import_graph()
    assert "ddp_doctor.rules.job_output" in graph["ddp_doctor.judge"]  # imported lazily there


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles({k: frozenset(v) for k, v in graph.items()}) == [["a", "b", "c"]]


def test_no_import_cycle_in_the_package() -> None:
    assert cycles(import_graph()) == []


def test_the_patient_imports_nothing_of_the_doctor() -> None:
    for name, imported in import_graph().items():
        if name.startswith("ddp_doctor.patient"):
            outside = {m for m in imported if not m.startswith("ddp_doctor.patient")}
            assert not outside, f"{name} imports {sorted(outside)}"


def test_the_doctors_top_level_stays_small() -> None:
    top = [p.name for p in (ROOT / "doctor").glob("*.py")]
    assert len(top) <= TOP_LEVEL_LIMIT, sorted(top)


# What a rule must not reach for: rules judge facts (a saved report re-judged elsewhere must
# give the same findings), so they import no measurer and no operation that reads files, and
# call nothing that opens, lists or runs anything. (logscan's scan_text, a reading of text the
# facts hold, is theirs to use.)
RULES_MAY_NOT_IMPORT = (
    "ddp_doctor.probes",
    "ddp_doctor.script",
    "ddp_doctor.trace",
    "ddp_doctor.flightrec",
    "ddp_doctor.run",
    "ddp_doctor.engine",
    "ddp_doctor.inputs",
)
SYSTEM_MODULES = frozenset(
    {"os", "pathlib", "io", "subprocess", "socket", "shutil", "glob", "tempfile", "urllib"}
)
SYSTEM_CALLS = frozenset(
    {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob",
     "exists", "is_file", "is_dir", "stat", "listdir", "scandir", "walk", "system", "popen"}
)  # fmt: skip


def _rule_modules() -> dict[str, Path]:
    return {n: p for n, p in module_files().items() if n.startswith("ddp_doctor.rules")}


def test_rules_import_no_probe_operation_or_file_reader() -> None:
    graph = import_graph()
    for name in _rule_modules():
        reached = {m for m in graph[name] if m.startswith(RULES_MAY_NOT_IMPORT)}
        assert not reached, f"{name} imports {sorted(reached)}"


def system_touches(tree: ast.Module) -> list[str]:
    """Imports of system modules and calls of file or process functions, as "line: what"."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            used = {alias.name.split(".")[0] for alias in node.names} & SYSTEM_MODULES
        elif isinstance(node, ast.ImportFrom) and not node.level:
            used = {(node.module or "").split(".")[0]} & SYSTEM_MODULES
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            used = {f"{called}()"} if called in SYSTEM_CALLS else set()
        else:
            continue
        found += [f"{node.lineno}: {what}" for what in sorted(used)]
    return found


def test_rules_touch_no_file_or_process() -> None:
    for name, path in _rule_modules().items():
        touches = system_touches(ast.parse(path.read_text(), str(path)))
        assert not touches, f"{name}: {touches}"


def test_the_rules_check_sees_a_rule_that_reads_a_file() -> None:
    tree = ast.parse("from pathlib import Path\nimport os\nPath('x').read_text()\nopen('y')\n")
    assert system_touches(tree) == ["1: pathlib", "2: os", "3: read_text()", "4: open()"]
