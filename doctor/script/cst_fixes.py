"""Concrete-syntax edits behind `check --fix`: one libcst pass applies every planned edit to a
module, so comments, blank lines and formatting outside the edits are kept byte for byte.

Only this module (and fixes.py) imports libcst, and only when --fix or --diff asks for it.
An edit is planned from a finding's code, place and evidence; `plan` returns None where no
edit is certain (an option declared in another file, an init that is its function's last
statement, two epoch loops that could be the one). Which edits are safe is fixes.py's call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from ddp_doctor.model import Finding

_LOCAL_RANK_OPTIONS = ("--local_rank", "'--local_rank'", '"--local_rank"')


@dataclass
class Edits:
    """What the single pass changes, keyed by the original nodes."""

    calls: dict[int, str] = field(default_factory=dict)  # id(Call) -> kind of call edit
    guard_statements: dict[int, str] = field(default_factory=dict)  # id(stmt) -> test code
    append_to: dict[int, str] = field(default_factory=dict)  # id(FunctionDef|Module) -> code
    prepend_to_loop: dict[int, str] = field(default_factory=dict)  # id(For) -> code
    import_os: bool = False

    def empty(self) -> bool:
        return not (self.calls or self.guard_statements or self.append_to or self.prepend_to_loop)


class Module:
    """A module's concrete tree with positions and parents, for planning edits."""

    def __init__(self, text: str) -> None:
        self.wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
        self.positions = self.wrapper.resolve(PositionProvider)
        self.parents = self.wrapper.resolve(ParentNodeProvider)
        self.tree = self.wrapper.module

    def calls_at(self, line: int, column: int) -> list[cst.Call]:
        """Calls that start at the 1-based line and 1-based column of a finding."""
        found = []
        for node, where in self.positions.items():
            start = where.start
            if isinstance(node, cst.Call) and (start.line, start.column) == (line, column - 1):
                found.append(node)
        return found

    def code(self, node: cst.CSTNode) -> str:
        return self.tree.code_for_node(node)

    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement line (or compound statement) a node sits in."""
        current: cst.CSTNode | None = node
        while current is not None and not isinstance(
            current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)
        ):
            current = self.parents.get(current)
        return current

    def owner_of(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module:
        current = self.parents.get(node)
        while current is not None and not isinstance(current, (cst.FunctionDef, cst.Module)):
            current = self.parents.get(current)
        return current if current is not None else self.tree

    def imports_os(self) -> bool:
        return bool(
            re.search(r"^import os\b|^import .*\bos\b|^from os import", self.tree.code, re.M)
        )


def plan(module: Module, finding: Finding, edits: Edits) -> bool:
    """Add the edit for one finding to `edits`; False when no certain edit exists."""
    where = finding.location
    if where is None or not where.line or not where.column:
        return False
    calls = module.calls_at(where.line, where.column)
    planner = _PLANNERS.get(finding.code)
    return bool(calls) and planner is not None and planner(module, calls[0], finding, edits)


def _plan_map_location(module: Module, call: cst.Call, finding: Finding, edits: Edits) -> bool:
    if any(arg.keyword is not None and arg.keyword.value == "map_location" for arg in call.args):
        return False  # map_location=None: leave the user's explicit choice to a person
    edits.calls[id(call)] = "map_location"
    return True


def _plan_local_rank(module: Module, call: cst.Call, finding: Finding, edits: Edits) -> bool:
    """DDP103 at the add_argument call; DDP104 at a placing call: fix the file's option."""
    option = call if _declares_local_rank(call) else _local_rank_option(module)
    if option is None:
        return False
    edits.calls[id(option)] = "local_rank"
    edits.import_os = edits.import_os or not module.imports_os()
    return True


def _plan_module_state_dict(module: Module, call: cst.Call, finding: Finding, edits: Edits) -> bool:
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "state_dict") or call.args:
        return False
    edits.calls[id(call)] = "module_state_dict"
    return True


def _plan_destroy(module: Module, call: cst.Call, finding: Finding, edits: Edits) -> bool:
    func = call.func  # the init itself, or a set-up helper (`utils.init_distributed_mode`)
    if isinstance(func, cst.Attribute) and func.attr.value == "init_process_group":
        destroy = f"{module.code(func.value)}.destroy_process_group()"
    elif "import torch\n" in module.tree.code or "import torch " in module.tree.code:
        destroy = "torch.distributed.destroy_process_group()"
    else:
        return False
    owner = module.owner_of(call)
    statement = module.statement_of(call)
    body = owner.body.body if isinstance(owner, cst.FunctionDef) else owner.body
    if statement is None or not body:
        return False
    if isinstance(owner, cst.FunctionDef) and body[-1] is statement:
        return False  # a setup() that only inits: its caller ends the work, not this function
    edits.append_to[id(owner)] = destroy
    return True


def _plan_rank_zero_guard(module: Module, call: cst.Call, finding: Finding, edits: Edits) -> bool:
    statement = module.statement_of(call)
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    code = module.tree.code
    if re.search(r"^import torch\.distributed as dist\b", code, re.M):
        test = "dist.get_rank() == 0"
    elif re.search(r"^import torch\b", code, re.M):
        test = "torch.distributed.get_rank() == 0"
    else:
        return False
    edits.guard_statements[id(statement)] = test
    return True


def _plan_set_epoch(module: Module, call: cst.Call, finding: Finding, edits: Edits) -> bool:
    sampler = str(finding.evidence.get("sampler", ""))
    loaders = [n.strip() for n in str(finding.evidence.get("loader", "")).split(",") if n.strip()]
    if not sampler.isidentifier() or len(loaders) != 1 or not loaders[0].isidentifier():
        return False
    loops = _epoch_loops(module, loaders[0])
    if len(loops) != 1:
        return False
    loop, epoch = loops[0]
    edits.prepend_to_loop[id(loop)] = f"{sampler}.set_epoch({epoch})"
    return True


def _epoch_loops(module: Module, loader: str) -> list[tuple[cst.For, str]]:
    """`for epoch in ...:` loops whose body iterates over the loader."""
    found = []
    for node in module.positions:
        if not isinstance(node, cst.For) or not isinstance(node.target, cst.Name):
            continue
        inner = [
            n
            for n in _descendants(node.body)
            if isinstance(n, cst.For)
            and re.search(rf"\b{re.escape(loader)}\b", module.code(n.iter))
        ]
        if inner:
            found.append((node, node.target.value))
    return found


def _descendants(node: cst.CSTNode) -> list[cst.CSTNode]:
    out: list[cst.CSTNode] = []
    todo = list(node.children)
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(current.children)
    return out


def _declares_local_rank(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else ""
    return name == "add_argument" and any(
        isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "--local_rank"
        for arg in call.args
    )


def _local_rank_option(module: Module) -> cst.Call | None:
    options = [n for n in module.positions if isinstance(n, cst.Call) and _declares_local_rank(n)]
    return options[0] if len(options) == 1 else None


_PLANNERS = {
    "DDP103": _plan_local_rank,
    "DDP104": _plan_local_rank,
    "DDP113": _plan_set_epoch,
    "DDP116": _plan_rank_zero_guard,
    "DDP117": _plan_module_state_dict,
    "DDP118": _plan_map_location,
    "DDP121": _plan_destroy,
}


def apply(module: Module, edits: Edits) -> str:
    """The module's text with every planned edit made in one pass."""
    if edits.empty():
        return module.tree.code
    return module.tree.visit(_Editor(edits)).code


class _Editor(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        kind = self.edits.calls.get(id(original))
        if kind == "map_location":
            return _with_keyword(updated, "map_location", cst.SimpleString('"cpu"'))
        if kind == "local_rank":
            return _local_rank_from_env(updated)
        if kind == "module_state_dict" and isinstance(updated.func, cst.Attribute):
            inner = cst.Attribute(value=updated.func.value, attr=cst.Name("module"))
            return updated.with_changes(func=updated.func.with_changes(value=inner))
        return updated

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement:
        test = self.edits.guard_statements.get(id(original))
        if test is None:
            return updated
        inner = updated.with_changes(leading_lines=())
        return cst.If(
            test=cst.parse_expression(test),
            body=cst.IndentedBlock(body=[inner]),
            leading_lines=updated.leading_lines,
        )

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        code = self.edits.prepend_to_loop.get(id(original))
        if code is None or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        line = cst.parse_statement(code + "\n")
        return updated.with_changes(body=updated.body.with_changes(body=[line, *updated.body.body]))

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        code = self.edits.append_to.get(id(original))
        if code is None or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = list(updated.body.body)
        return updated.with_changes(body=updated.body.with_changes(body=_before_return(body, code)))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body = list(updated.body)
        code = self.edits.append_to.get(id(original))
        if code is not None:
            body = _before_return(body, code)
        if self.edits.import_os:
            body.insert(_import_position(body), cst.parse_statement("import os\n"))
        return updated.with_changes(body=body)


def _before_return(body: list[cst.BaseStatement], code: str) -> list[cst.BaseStatement]:
    line = cst.parse_statement(code + "\n")
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        return [*body[:-1], line, last]
    return [*body, line]


def _import_position(body: Sequence[cst.BaseStatement]) -> int:
    """After the docstring and `from __future__` imports."""
    index = 0
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.SimpleStatementLine):
            return index
        first = statement.body[0]
        docstring = isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString)
        future = isinstance(first, cst.ImportFrom) and _is_future(first)
        if not (docstring and index == 0) and not future:
            return index
    return index + 1 if body else 0


def _is_future(node: cst.ImportFrom) -> bool:
    module = node.module
    return isinstance(module, cst.Name) and module.value == "__future__"


def _with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    args = list(call.args)
    keyword = cst.Arg(
        keyword=cst.Name(name),
        value=value,
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    if args and isinstance(args[-1].comma, cst.MaybeSentinel):
        args[-1] = args[-1].with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
    return call.with_changes(args=[*args, keyword])


def _local_rank_from_env(call: cst.Call) -> cst.Call:
    """add_argument("--local-rank", "--local_rank", ..., default=int(os.environ.get(
    "LOCAL_RANK", <old default>)))."""
    args: list[cst.Arg] = []
    old_default = "0"
    for arg in call.args:
        value = arg.value
        if (
            arg.keyword is None
            and isinstance(value, cst.SimpleString)
            and value.evaluated_value == "--local_rank"
        ):
            quote = value.value[0] if value.value[0] in "'\"" else '"'
            spelled = cst.SimpleString(f"{quote}--local-rank{quote}")
            space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            args.append(cst.Arg(value=spelled, comma=space))
        if arg.keyword is not None and arg.keyword.value == "default":
            old_default = cst.Module([]).code_for_node(value)
            continue
        args.append(arg)
    call = call.with_changes(args=args)
    default = cst.parse_expression(f'int(os.environ.get("LOCAL_RANK", {old_default}))')
    return _with_keyword(call, "default", default)
