"""Where a value comes from: a small data flow over the recorded assignments, across the
functions and modules of the checked tree.

`origins(expr)` answers with the places that made the value: the call that built it
(`DDP(model, ...)`, `DataLoader(...)`, `torch.device("cuda:1")`), a constant, an argparse
option (`args.local_rank` where `args = parser.parse_args()`), an environment variable, the
process index mp.spawn passes, or a parameter nobody in the tree passes. Names are followed
through the assignments that reach the use (in source order, minus other branches'), then
parameters to the arguments of every call of the function, returns to the returned
expressions, `self.x` to every `self.x = ...` of the class, `obj.x` through the class of
`obj`, `d["k"]` to `d["k"] = ...` or the dict literal, `ddp.module` to the wrapped module and
`loader.sampler` to the loader's sampler. Calls into the tree are followed `DEPTH` deep and
every answer is remembered, so the cost stays linear in the code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ddp_doctor.script import names
from ddp_doctor.script import reaching as reaching_mod
from ddp_doctor.script.callgraph import DEPTH
from ddp_doctor.script.facts import MODULE, ClassInfo, Context, Function, ScriptFacts
from ddp_doctor.script.guards import is_wrapper_test
from ddp_doctor.script.origins import (
    ATTRIBUTE,
    CALL,
    CONSTANT,
    DEFINITION,
    ENV,
    INSTANCE,
    NAME,
    NOTHING,
    OPTION,
    OTHER,
    PARAM,
    SPAWN_INDEX,
    Origin,
    Origins,
)
from ddp_doctor.script.project import Project
from ddp_doctor.script.wrappertests import tests_data_parallel_only

# Module methods that return the module itself: `model.cuda()` is still `model`.
_RETURNS_SELF = frozenset(
    {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval", "to_empty"}
    | {"requires_grad_", "share_memory"}
)
CONVERSIONS = frozenset({"int", "str", "float"})
_WRAPPERS = (names.DDP, names.DATA_PARALLEL)
_NAMESPACES = frozenset({"parse_args", "parse_known_args"})


_MAX_NESTING = 120  # values followed inside one another (each takes a few stack frames)


class Values:
    def __init__(self, project: Project) -> None:
        self.project = project
        self._memo: dict[tuple[int, int], Origins] = {}
        self._active: set[tuple[int, int]] = set()

    def forget(self) -> None:
        """Drop remembered answers (they were given over an incomplete call graph)."""
        self._memo.clear()

    # questions -------------------------------------------------------------------------------

    def origins(
        self, facts: ScriptFacts, expr: ast.AST, ctx: Context, depth: int = DEPTH
    ) -> Origins:
        key = (id(expr), depth)
        found = self._memo.get(key)
        if found is not None:
            return found
        if key in self._active:
            return NOTHING  # a cycle: x = f(x)
        if len(self._active) > _MAX_NESTING:  # x3000 = x2999 = ...: unknown, not a crash
            return frozenset({Origin(OTHER, expr, facts)})
        self._active.add(key)
        try:
            found = frozenset(self._origins(facts, expr, ctx, depth))
        finally:
            self._active.discard(key)
        self._memo[key] = found
        return found

    def calls_to(
        self, facts: ScriptFacts, expr: ast.AST, ctx: Context, *qualnames: str
    ) -> list[Origin]:
        """The calls of `qualnames` the value may come from: is this the DDP model?"""
        return [o for o in self.origins(facts, expr, ctx) if o.qualname in qualnames]

    def classes_of(
        self, facts: ScriptFacts, expr: ast.AST, ctx: Context, at: ast.AST | None = None
    ) -> tuple[set[ClassInfo], bool]:
        """Classes of the tree the value is an instance of, and whether it may be something
        from outside the tree (a library object)."""
        found = self.origins(facts, expr, ctx)
        classes = {o.cls for o in found if o.kind == INSTANCE and o.cls is not None}
        foreign = any(o.kind == CALL and o.qualname is not None for o in found)
        return classes, foreign

    # expressions -----------------------------------------------------------------------------

    def _origins(
        self, facts: ScriptFacts, expr: ast.AST, ctx: Context, depth: int
    ) -> Iterable[Origin]:
        kind = type(expr)
        if kind is ast.IfExp:
            return self._conditional(facts, expr, ctx, depth)  # type: ignore[arg-type]
        if kind is ast.BoolOp:
            return _union(self.origins(facts, v, ctx, depth) for v in expr.values)  # type: ignore[attr-defined]
        if kind in (ast.NamedExpr, ast.Starred, ast.Await):
            return self.origins(facts, expr.value, ctx, depth)  # type: ignore[attr-defined]
        if kind is ast.Constant:
            return {Origin(CONSTANT, expr, facts)}
        if kind is ast.Name:
            return self._name(facts, expr.id, ctx, expr, depth)  # type: ignore[attr-defined]
        if kind is ast.Attribute:
            return self._attribute(facts, expr, ctx, depth)  # type: ignore[arg-type]
        if kind is ast.Subscript:
            return self._item(facts, expr, ctx, depth)  # type: ignore[arg-type]
        if kind is ast.Call:
            return self._call(facts, expr, ctx, depth)  # type: ignore[arg-type]
        return {Origin(OTHER, expr, facts)}

    def _conditional(
        self, facts: ScriptFacts, expr: ast.IfExp, ctx: Context, depth: int
    ) -> set[Origin]:
        """Both arms; the `else` of `m.module if hasattr(m, "module") else m` holds no wrapper
        (that of a test naming only nn.DataParallel may: DDP is no DataParallel)."""
        body = self.origins(facts, expr.body, ctx, depth)
        orelse = self.origins(facts, expr.orelse, ctx, depth)
        if is_wrapper_test(expr.test) and not tests_data_parallel_only(facts, expr.test):
            orelse = frozenset(o for o in orelse if o.qualname not in _WRAPPERS)
        return set(body | orelse)

    def _call(self, facts: ScriptFacts, call: ast.Call, ctx: Context, depth: int) -> set[Origin]:
        func = call.func
        if isinstance(func, ast.Name) and func.id in CONVERSIONS and call.args:
            return set(self.origins(facts, call.args[0], ctx, depth))
        env = reaching_mod.env_name(call)
        if env is not None:
            return {Origin(ENV, call, facts, env)}
        made = Origin(CALL, call, facts)
        if isinstance(func, ast.Attribute) and func.attr in _RETURNS_SELF:
            return {made} | self.origins(facts, func.value, ctx, depth)
        defined = self.project.definition(facts, func, ctx)
        if isinstance(defined, ClassInfo):
            return {Origin(INSTANCE, call, facts, defined.name, defined)}
        site = facts.site_of.get(id(call))
        targets = self.project.graph.targets(facts, site) if site is not None else ()
        if not targets or depth <= 0:
            return {made}
        found: set[Origin] = set()
        for target in targets:
            found |= self._returned(target, depth - 1)
        return found or {made}

    def _returned(self, function: Function, depth: int, index: tuple[int, ...] = ()) -> Origins:
        owner = self.project.owner(function)
        found: set[Origin] = set()
        for value in owner.returns.get(function.qualname, ()):
            ctx = owner.return_contexts.get(id(value), Context(function=function))
            element = reaching_mod.element(value, index)
            if element is not None:
                found |= self.origins(owner, element, ctx, depth)
            else:
                found.add(Origin(OTHER, value, owner))
        return frozenset(found)

    # names -----------------------------------------------------------------------------------

    def _name(
        self, facts: ScriptFacts, name: str, ctx: Context, at: ast.AST | None, depth: int
    ) -> set[Origin]:
        function = ctx.function
        if function is not None:
            local = [
                a for a in facts.assignments_by_target.get(name, ()) if a.ctx.function is function
            ]
            reaching = reaching_mod.reaching(local, ctx, at)
            if reaching:
                return self._assigned(facts, reaching, depth)
            if name in function.params:
                return self._param(facts, function, name, depth)
            if local:
                return self._assigned(facts, local, depth)  # set later in a loop
            outer = self.project.enclosing(facts, function)
            if outer is not None:
                return self._name(facts, name, Context(function=outer), None, depth)
        module_level = [
            a
            for a in facts.assignments_by_target.get(name, ())
            if a.ctx.function is None and a.ctx.class_name is None
        ]
        if module_level:
            chosen = reaching_mod.reaching(module_level, ctx, at) if ctx.module_level else []
            return self._assigned(facts, chosen or module_level, depth)
        return self._global(facts, name, depth)

    def _global(self, facts: ScriptFacts, name: str, depth: int) -> set[Origin]:
        defined = self.project.top_level(facts, name)
        if isinstance(defined, (Function, ClassInfo, ScriptFacts)):
            node = defined.node if not isinstance(defined, ScriptFacts) else defined.tree
            return {Origin(DEFINITION, node, facts, name)}
        ref = facts.imports.refs.get(name)
        if ref is not None and ref.name is not None and depth > 0:
            source = self.project.module(facts, ref.module, ref.level)
            if source is not None and source is not facts:
                return self._name(source, ref.name, MODULE, None, depth - 1)
        return {Origin(NAME, None, facts, facts.imports.names.get(name, name))}

    def _assigned(self, facts: ScriptFacts, assignments: list, depth: int) -> set[Origin]:  # type: ignore[type-arg]
        found: set[Origin] = set()
        for assignment in assignments:
            if assignment.element:
                found.add(Origin(OTHER, assignment.node, facts))  # an element of the iterable
                continue
            value = reaching_mod.element(assignment.value, assignment.index)
            if value is not None:
                found |= self.origins(facts, value, assignment.ctx, depth)
            elif isinstance(assignment.value, ast.Call):
                found |= self._unpacked_call(facts, assignment, depth)
            else:
                found.add(Origin(OTHER, assignment.value, facts))
        return found

    def _unpacked_call(self, facts: ScriptFacts, assignment, depth: int) -> set[Origin]:  # type: ignore[no-untyped-def]
        """`model, opt = build(cfg)`: the matching element of what build returns."""
        site = facts.site_of.get(id(assignment.value))
        targets = self.project.graph.targets(facts, site) if site is not None else ()
        found: set[Origin] = set()
        if depth > 0:
            for target in targets:
                found |= self._returned(target, depth - 1, assignment.index)
        return found or {Origin(CALL, assignment.value, facts)}

    def _param(self, facts: ScriptFacts, function: Function, name: str, depth: int) -> set[Origin]:
        unknown = {Origin(PARAM, function.node, facts, name)}
        edges = self.project.graph.callers(function)
        if depth <= 0 or not edges:
            return unknown
        index = function.params.index(name)
        found: set[Origin] = set()
        for edge in edges:
            site = edge.site
            if edge.handed:
                found |= self._handed_argument(edge, index, depth) if edge.spawned else unknown
                continue
            argument = reaching_mod.argument(site.node, function, index, name, self._bound(edge))
            if argument is None:
                argument = reaching_mod.default(function, name)
                if argument is None:
                    found |= unknown
                    continue
                found |= self.origins(facts, argument, Context(function=function), depth - 1)
                continue
            found |= self.origins(edge.facts, argument, site.ctx, depth - 1)
        return found

    def _handed_argument(self, edge, index: int, depth: int) -> set[Origin]:  # type: ignore[no-untyped-def]
        """mp.spawn(fn, args=(a, b)): fn(process_index, a, b)."""
        if index == 0:
            return {Origin(SPAWN_INDEX, edge.site.node, edge.facts)}
        passed = edge.site.keyword("args")
        if isinstance(passed, ast.Tuple) and index - 1 < len(passed.elts):
            return set(self.origins(edge.facts, passed.elts[index - 1], edge.site.ctx, depth - 1))
        return {Origin(PARAM, edge.callee.node, edge.facts, edge.callee.params[index])}

    def _bound(self, edge) -> bool:  # type: ignore[no-untyped-def]
        """Whether the call passes `self` implicitly: obj.method(...) or Class(...)."""
        callee = edge.callee
        if callee.class_name is None or "staticmethod" in callee.decorators:
            return False
        func = edge.site.node.func
        if isinstance(func, ast.Attribute):
            defined = self.project.definition(edge.facts, func.value, edge.site.ctx)
            return not isinstance(defined, ClassInfo) or "classmethod" in callee.decorators
        return True  # Class(...) runs __init__(self, ...)

    # attributes and items --------------------------------------------------------------------

    def _attribute(
        self, facts: ScriptFacts, expr: ast.Attribute, ctx: Context, depth: int
    ) -> set[Origin]:
        path = names.access_path(expr)
        stored: set[Origin] = set()
        if path is not None:
            stored = self._stored(facts, path, ctx, expr, depth)
            assigned = facts.assignments_by_target.get(path, ())
            if stored and not reaching_mod.kept_on_a_path(assigned, path, ctx, expr):
                return stored
        found: set[Origin] = set()
        for base in self.origins(facts, expr.value, ctx, depth):
            found |= self._member(base, expr, depth)
        return stored | (found or {Origin(ATTRIBUTE, expr, facts, expr.attr)})

    def _stored(
        self, facts: ScriptFacts, path: str, ctx: Context, at: ast.AST, depth: int
    ) -> set[Origin]:
        """Values assigned to the path itself: `self.model = ...` anywhere in the class,
        `args.gpu = gpu` before this use in the function."""
        assignments = facts.assignments_by_target.get(path, ())
        if not assignments:
            return set()
        local = [a for a in assignments if a.ctx.function is ctx.function]
        reaching = reaching_mod.reaching(local, ctx, at)
        if reaching:
            return self._assigned(facts, reaching, depth)
        if path.startswith("self.") and ctx.class_name is not None:
            later_here = {
                id(a) for a in local if reaching_mod.start_of(a.node) >= reaching_mod.start_of(at)
            }
            own = [
                a
                for a in assignments
                if a.ctx.class_name == ctx.class_name and id(a) not in later_here
            ]
            return self._assigned(facts, reaching_mod.final(own), depth) if own else set()
        return set()

    def _member(self, base: Origin, expr: ast.Attribute, depth: int) -> set[Origin]:
        attr = expr.attr
        call = base.call
        if base.kind == CALL and call is not None and base.facts is not None:
            func_name = names.last_identifier(call.func)
            if func_name in _NAMESPACES:
                return {Origin(OPTION, expr, base.facts, attr)}
            copied = reaching_mod.copied_namespace(call)
            if copied is not None:  # Config.load(**vars(args)): args' attributes, carried over
                site = base.facts.site_of.get(id(call))
                if site is not None:
                    carried = ast.Attribute(value=copied, attr=attr, ctx=ast.Load())
                    ast.copy_location(carried, call)
                    return set(self._attribute(base.facts, carried, site.ctx, depth))
            qualname = base.qualname
            if attr == "module" and qualname in (names.DDP, names.DATA_PARALLEL):
                site = base.facts.site_of.get(id(call))
                wrapped = site.argument(0, "module") if site else None
                if wrapped is not None:
                    return set(self.origins(base.facts, wrapped, site.ctx, depth))  # type: ignore[union-attr]
            if qualname == names.DATA_LOADER and attr in ("sampler", "batch_sampler"):
                site = base.facts.site_of.get(id(call))
                given = site.argument(2, "sampler") if site and attr == "sampler" else None
                given = given or (site.keyword("batch_sampler") if site else None)
                if given is not None:
                    return set(self.origins(base.facts, given, site.ctx, depth))  # type: ignore[union-attr]
        if base.kind == INSTANCE and base.cls is not None:
            return self._class_attribute(base.cls, attr, depth)
        if base.kind == PARAM and base.facts is not None:
            return {Origin(ATTRIBUTE, expr, base.facts, attr)}
        return set()

    def _class_attribute(self, cls: ClassInfo, attr: str, depth: int) -> set[Origin]:
        for method in cls.methods.values():
            owner = self.project.owner(method)
            own = [
                a
                for a in owner.assignments_by_target.get(f"self.{attr}", ())
                if a.ctx.class_name == cls.name
            ]
            return self._assigned(owner, reaching_mod.final(own), depth) if own else set()
        return set()

    def _item(
        self, facts: ScriptFacts, expr: ast.Subscript, ctx: Context, depth: int
    ) -> set[Origin]:
        path = names.access_path(expr)
        if path is not None:
            stored = self._stored(facts, path, ctx, expr, depth)
            if stored:
                return stored
        key = expr.slice.value if isinstance(expr.slice, ast.Constant) else None
        if isinstance(key, str) and (names.dotted(expr.value) or "").endswith("environ"):
            return {Origin(ENV, expr, facts, key)}
        found: set[Origin] = set()
        if key is not None:
            for base in self.origins(facts, expr.value, ctx, depth):
                value = reaching_mod.dict_value(base.node, key)
                if value is not None and base.facts is not None:
                    found |= self.origins(base.facts, value, ctx, depth)
        return found or {Origin(OTHER, expr, facts)}


def _union(parts: Iterable[Origins]) -> set[Origin]:
    found: set[Origin] = set()
    for part in parts:
        found |= part
    return found
