"""The one pass over a script's AST that records everything the rules read (see facts.py).

Statements are visited recursively (Python's parser bounds their nesting); expressions with an
explicit stack, so a generated file with a 10,000-term sum cannot overflow the recursion limit.
"""

from __future__ import annotations

import ast

from ddp_doctor.script import guards, launchtests
from ddp_doctor.script.armguards import false_arm_polarity
from ddp_doctor.script.facts import (
    MODULE,
    SINGLE,
    ZERO,
    Assignment,
    CallSite,
    ClassInfo,
    Context,
    Function,
    Loop,
    RankGuard,
    ScriptFacts,
    TorchImport,
)
from ddp_doctor.script.names import TORCH_LOADING_ROOTS, access_path, dotted, last_identifier
from ddp_doctor.script.notebook import kernel_names
from ddp_doctor.script.walkenv import (
    add_module_aliases,
    opens_devnull,
    record_environ_call,
    record_environ_subscript,
)
from ddp_doctor.script.walkshapes import (
    child_fields,
    in_arm,
    in_arms,
    is_main_guard,
    marked,
)

_NO_GRAD = frozenset({"no_grad", "inference_mode"})


def build_facts(path: str, source: str, tree: ast.Module) -> ScriptFacts:
    facts = ScriptFacts(path=path, source=source, tree=tree)
    facts.imports.names.update(kernel_names(path, source))
    _Walker(facts).body(tree.body, MODULE)
    add_module_aliases(facts)
    return facts


_MAY_GUARD_THE_REST = frozenset({ast.If, ast.Assert})  # an early exit, an assert on the launch
# statement kinds built once (a tuple of them was built for every statement that reached it)
_FUNCTION_KINDS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_FOR_KINDS = frozenset({ast.For, ast.AsyncFor})
_WITH_KINDS = frozenset({ast.With, ast.AsyncWith})
_IMPORT_KINDS = frozenset({ast.Import, ast.ImportFrom})
_TRY_KINDS = frozenset({ast.Try, getattr(ast, "TryStar", ast.Try)})
_MATCH = getattr(ast, "Match", None)


class _Walker:
    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.imports = facts.imports
        # Names assigned a rank test (`is_main = rank == 0`), per function; `self.x` per class.
        self.flags: dict[object, dict[str, str]] = {}
        self._merged: dict[tuple[object, object], dict[str, str]] = {}  # until a flag changes
        # Names just set to None (`writer = None`), per scope: set under a rank guard next, they
        # hold that guard (`if rank == 0: writer = SummaryWriter()`; `if not writer: continue`).
        self.unset: dict[object, set[str]] = {}

    def _flags(self, ctx: Context) -> dict[str, str]:
        if not self.flags:
            return _NO_FLAGS
        key = (ctx.class_name, ctx.function)
        found = self._merged.get(key)
        if found is None:
            found = dict(self.flags.get(None, {}))  # module level
            if ctx.class_name:
                found.update(self.flags.get(ctx.class_name, {}))
            if ctx.function is not None:
                found.update(self.flags.get(ctx.function, {}))
            self._merged[key] = found
        return found

    def _remember_flag(self, target: ast.expr, value: ast.expr, ctx: Context) -> None:
        text = dotted(target)
        if type(value) in _NOT_TESTS:  # x = 3, x = [...]: no rank test
            if text is not None and isinstance(value, ast.Constant) and value.value is None:
                self.unset.setdefault(_scope_of(text, ctx), set()).add(text)
            return
        if text is None:
            return
        flags = self._flags(ctx)
        polarity = guards.held_only_on(value, flags) or guards.classify(value, flags)
        scope = _scope_of(text, ctx)
        if polarity is None and ctx.guard is not None and text in self.unset.get(scope, ()):
            polarity = ctx.guard.polarity  # None, then set on one side of a rank guard only
        self.unset.get(scope, set()).discard(text)
        if polarity is not None:
            self.flags.setdefault(scope, {})[text] = polarity
            self._merged.clear()
        elif text in self.flags.get(scope, {}):
            del self.flags[scope][text]
            self._merged.clear()

    # statements ------------------------------------------------------------------------------

    def body(self, statements: list[ast.stmt], ctx: Context) -> None:
        for stmt in statements:
            self.statement(stmt, ctx)
            if type(stmt) in _MAY_GUARD_THE_REST:  # asked of every statement: kept cheap
                ctx = self._after_early_exit(stmt, ctx)

    def _after_early_exit(self, stmt: ast.stmt, ctx: Context) -> Context:
        """`if rank != 0: return` guards every statement after it in the same block; after
        `assert opt.local_rank == -1, "DDP mode not implemented for --evolve"` the block runs
        without a launcher."""
        if isinstance(stmt, ast.Assert) and ctx.launch is None:
            return (
                ctx._replace(launch=SINGLE) if launchtests.launch_of(stmt.test) == SINGLE else ctx
            )
        guard = None
        arm = stmt  # `if not cuda: return` / `elif "RANK" not in os.environ: return`: each false
        while isinstance(arm, ast.If) and guards.ends_control_flow(arm.body):
            ctx = in_arm(ctx, arm, arm.test, arm=False)
            polarity = false_arm_polarity(arm.test, self._flags(ctx))
            guard = guard or (RankGuard(polarity, arm) if polarity else None)
            arm = arm.orelse[0] if len(arm.orelse) == 1 else None
        return ctx._replace(guard=guard) if guard else ctx

    def statement(self, stmt: ast.stmt, ctx: Context) -> None:
        kind = type(stmt)
        if kind is ast.Expr:
            self.expr(stmt.value, ctx)
        elif kind is ast.Assign:
            self.expr(stmt.value, ctx)
            for target in stmt.targets:
                self.target(target, stmt.value, stmt, ctx)
                self._remember_flag(target, stmt.value, ctx)
        elif kind is ast.AnnAssign:
            if stmt.value is not None:
                self.expr(stmt.value, ctx)
                self.target(stmt.target, stmt.value, stmt, ctx)
        elif kind is ast.AugAssign:
            self.expr(stmt.value, ctx)
            if isinstance(stmt.target, ast.Name):  # seed += offset: seed = seed + offset
                load = ast.copy_location(ast.Name(stmt.target.id, ast.Load()), stmt.target)
                grown = ast.copy_location(ast.BinOp(load, stmt.op, stmt.value), stmt)
                self.target(stmt.target, grown, stmt, ctx)
        elif kind in _FUNCTION_KINDS:
            self.function(stmt, ctx)
        elif kind is ast.ClassDef:
            self.class_definition(stmt, ctx)
        elif kind is ast.If:
            self.if_statement(stmt, ctx)
        elif kind in _FOR_KINDS:
            self.expr(stmt.iter, ctx)
            self.loop_target(stmt.target, stmt.iter, ctx)
            loop = Loop(stmt, dotted(stmt.target), dotted(stmt.iter), ctx)
            self.facts.loops.append(loop)
            self.body(stmt.body, ctx._replace(loops=(*ctx.loops, loop)))
            self.body(stmt.orelse, ctx)
        elif kind is ast.While:
            self.expr(stmt.test, ctx)
            loop = Loop(stmt, None, None, ctx)
            self.facts.loops.append(loop)
            self.body(stmt.body, ctx._replace(loops=(*ctx.loops, loop)))
            self.body(stmt.orelse, ctx)
        elif kind in _WITH_KINDS:
            self.with_statement(stmt, ctx)
        elif kind is ast.Return:
            if stmt.value is not None:
                self.expr(stmt.value, ctx)
                if ctx.function is not None:
                    self.facts.returns[ctx.function.qualname].append(stmt.value)
                    self.facts.return_contexts[id(stmt.value)] = ctx
        elif kind in _IMPORT_KINDS:
            self.import_statement(stmt, ctx)
        elif kind in _TRY_KINDS:
            self.body(stmt.body, ctx)
            for handler in stmt.handlers:
                self.body(handler.body, ctx)
            self.body(stmt.orelse, ctx)
            self.body(stmt.finalbody, ctx)
        elif kind is _MATCH:
            self.expr(stmt.subject, ctx)
            for case in stmt.cases:
                self.body(case.body, ctx)
        else:  # Raise, Assert, Delete, ...: only their expressions matter
            if kind is ast.Assert:
                self.facts.asserts.append((stmt, ctx))  # type: ignore[arg-type]
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self.expr(child, ctx)

    def function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, ctx: Context) -> None:
        self.exprs(node.decorator_list, ctx)
        self.exprs([d for d in node.args.defaults + node.args.kw_defaults if d is not None], ctx)
        args = node.args
        params = tuple(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs)
        outer = ctx.function.qualname + "." if ctx.function else ""
        prefix = outer or (ctx.class_name + "." if ctx.class_name else "")
        decorators = tuple(last_identifier(d) or "" for d in node.decorator_list)
        function = Function(node.name, prefix + node.name, ctx.class_name, node, params, decorators)
        self.facts.functions.append(function)
        if guards.rank_zero_predicate(node, self._flags(ctx)):
            own = ctx.function if ctx.function is not None else ctx.class_name
            text = (
                f"self.{node.name}()" if ctx.class_name and not ctx.function else f"{node.name}()"
            )
            self.flags.setdefault(own, {})[text] = ZERO
            self._merged.clear()
        no_grad = any(name in _NO_GRAD for name in decorators)
        self.body(node.body, Context(function=function, class_name=ctx.class_name, no_grad=no_grad))

    def class_definition(self, node: ast.ClassDef, ctx: Context) -> None:
        self.exprs(node.bases + node.decorator_list, ctx)
        first = len(self.facts.functions)
        self.body(node.body, Context(class_name=node.name))
        if ctx.function is None and ctx.class_name is None:
            methods = {
                f.name: f
                for f in self.facts.functions[first:]
                if f.qualname == f"{node.name}.{f.name}"
            }
            bases = tuple(text for b in node.bases if (text := dotted(b)) is not None)
            self.facts.classes[node.name] = ClassInfo(node.name, node, bases, methods)

    def if_statement(self, node: ast.If, ctx: Context) -> None:
        self.expr(node.test, ctx)
        if is_main_guard(node.test):
            self.body(node.body, ctx._replace(main_guard=True))
            self.body(node.orelse, ctx)
            return
        body, orelse = in_arms(ctx, node, node.test)
        flags = self._flags(ctx)
        polarity = guards.classify(node.test, flags)
        if polarity is not None:
            body = body._replace(guard=RankGuard(polarity, node))
        other = _false_arm(node.test, polarity, flags)
        if other is not None:
            orelse = orelse._replace(guard=RankGuard(other, node))
        self.body(node.body, body)
        self.body(node.orelse, orelse)

    def with_statement(self, node: ast.With | ast.AsyncWith, ctx: Context) -> None:
        no_grad = ctx.no_grad
        for item in node.items:
            self.expr(item.context_expr, ctx)
            if last_identifier(item.context_expr) in _NO_GRAD:
                no_grad = True
            if item.optional_vars is not None:
                self.target(item.optional_vars, item.context_expr, node, ctx)
        self.body(node.body, ctx._replace(no_grad=no_grad) if no_grad != ctx.no_grad else ctx)

    def import_statement(self, node: ast.Import | ast.ImportFrom, ctx: Context) -> None:
        if isinstance(node, ast.Import):
            self.imports.add_import(node)
            modules = [alias.name for alias in node.names]
        else:
            self.imports.add_import_from(node)
            modules = [node.module or ""] if not node.level else []
        if any(m.split(".", 1)[0] in TORCH_LOADING_ROOTS for m in modules):
            self.facts.torch_imports.append(TorchImport(node, ctx))

    def loop_target(self, target: ast.expr, iterable: ast.expr, ctx: Context) -> None:
        """`for name, module in ...`: each name holds an element of the iterable."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.loop_target(element, iterable, ctx)
            return
        text = dotted(target)
        if text is not None:
            assignment = Assignment(text, iterable, target, ctx, element=True)
            self.facts.assignments.append(assignment)

    def target(
        self,
        target: ast.expr,
        value: ast.expr,
        node: ast.AST,
        ctx: Context,
        index: tuple[int, ...] = (),
    ) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for position, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    element = element.value
                self.target(element, value, node, ctx, (*index, position))
            return
        text = dotted(target)
        if text is not None:
            self.facts.assignments.append(Assignment(text, value, node, ctx, index))  # type: ignore[arg-type]
            if text in ("builtins.print", "__builtin__.print", "__builtins__.print"):
                self.facts.print_overridden = True
            elif text == "sys.stdout" and opens_devnull(value):
                self.facts.print_overridden = True  # llama's Llama.build off local rank 0
            return
        if isinstance(target, ast.Subscript):
            record_environ_subscript(self.facts, target, ctx, writes=True, value=value)
            path = access_path(target)
            if path is not None:
                self.facts.assignments.append(Assignment(path, value, node, ctx, index))  # type: ignore[arg-type]
        self.expr(target, ctx)

    # expressions -----------------------------------------------------------------------------

    def exprs(self, nodes: list[ast.expr], ctx: Context) -> None:
        for node in nodes:
            self.expr(node, ctx)

    def expr(self, root: ast.expr, ctx: Context) -> None:
        facts = self.facts
        calls = facts.calls
        stack: list[ast.AST] = [root]
        pop, push, extend = stack.pop, stack.append, stack.extend
        known_fields = _CHILD_FIELDS
        # the node types asked about, as locals: this loop runs once per expression node
        Call, Constant, Name, Attribute = ast.Call, ast.Constant, ast.Name, ast.Attribute
        imported = self.imports.names
        while stack:
            node = pop()
            kind = type(node)
            if kind is Name or node is None:  # None: a list field's hole ({**spread} keys)
                continue
            if kind is Attribute:
                push(node.value)  # type: ignore[attr-defined]  (its only child expression)
                continue
            if kind is Call:
                func = node.func  # type: ignore[attr-defined]
                if type(func) is Attribute:  # the call's key, after import aliases
                    key = func.attr
                elif type(func) is Name:
                    qualified = imported.get(func.id)
                    key = qualified.rsplit(".", 1)[-1] if qualified else func.id
                else:
                    key = ""
                calls.append(CallSite(node, ctx, key))  # type: ignore[arg-type]
                record_environ_call(facts, node, ctx)  # type: ignore[arg-type]
            elif kind is Constant:
                value = node.value  # type: ignore[attr-defined]
                if type(value) is str and marked(value):
                    facts.strings.append(node)  # type: ignore[arg-type]
                continue
            elif kind is ast.IfExp:
                self.conditional(node, ctx)  # type: ignore[arg-type]
                continue
            elif kind is ast.BoolOp:
                self.short_circuit(node, ctx)  # type: ignore[arg-type]
                continue
            elif kind is ast.Subscript:
                record_environ_subscript(facts, node, ctx, writes=False)  # type: ignore[arg-type]
            elif kind is ast.NamedExpr:
                target = node.target.id  # type: ignore[attr-defined]
                facts.assignments.append(Assignment(target, node.value, node, ctx))  # type: ignore
            fields = known_fields.get(kind)
            if fields is None:
                fields = known_fields[kind] = child_fields(kind)
            for name in fields:
                child = getattr(node, name, None)
                if child is None:
                    continue
                if type(child) is list:
                    extend(child)
                else:
                    push(child)

    def conditional(self, node: ast.IfExp, ctx: Context) -> None:
        """`tqdm(loader) if is_master else loader`: each arm in its own context."""
        self.expr(node.test, ctx)
        body, orelse = in_arms(ctx, node, node.test)
        polarity = guards.classify(node.test, self._flags(ctx))
        if polarity is not None:
            body = body._replace(guard=RankGuard(polarity, node))
            orelse = orelse._replace(guard=RankGuard(guards.flip(polarity) or polarity, node))
        self.expr(node.body, body)
        self.expr(node.orelse, orelse)

    def short_circuit(self, node: ast.BoolOp, ctx: Context) -> None:
        """`is_master and print(...)`: each operand in the context the ones before it give."""
        flags = self._flags(ctx)
        for value, polarity in zip(node.values, guards.operand_guards(node, flags), strict=True):
            self.expr(value, ctx._replace(guard=RankGuard(polarity, node)) if polarity else ctx)


_NO_FLAGS: dict[str, str] = {}
# Values that cannot be a rank test (a call can: is_main_process(); so can a name or compare).
_NOT_TESTS = frozenset({ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def _false_arm(test: ast.expr, polarity: str | None, flags: dict[str, str]) -> str | None:
    """false_arm_polarity(test), given the test's own polarity: for a test other than `not`
    and `and` it is that polarity flipped (asked of every `if`: classified once)."""
    if type(test) is ast.UnaryOp or type(test) is ast.BoolOp:
        return false_arm_polarity(test, flags)
    return guards.flip(polarity)


def _scope_of(text: str, ctx: Context) -> object:
    return ctx.class_name if text.startswith("self.") else ctx.function
