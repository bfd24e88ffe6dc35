"""Helpers for the rank rules: saves, spans, collective helpers, rank-aware logging set-ups."""

from __future__ import annotations

import ast
import re
from collections import Counter

from ddp_doctor.script import names
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import NONZERO, ZERO, CallSite, ClassInfo, Function, ScriptFacts
from ddp_doctor.script.guards import is_main_process_predicate, is_rank_like
from ddp_doctor.script.reaching import element


def contains(outer: ast.AST, inner: ast.AST) -> bool:
    """Whether `inner`'s source span lies within `outer`'s."""
    start = (outer.lineno, outer.col_offset)  # type: ignore[attr-defined]
    end = (outer.end_lineno, outer.end_col_offset)  # type: ignore[attr-defined]
    return start <= (inner.lineno, inner.col_offset) and (  # type: ignore[attr-defined]
        (inner.end_lineno, inner.end_col_offset) <= end  # type: ignore[attr-defined]
    )


def save_calls(facts: ScriptFacts) -> list[CallSite]:
    """torch.save and helpers named like a save: save_checkpoint, save_on_master, xm.save."""
    return [c for c in facts.calls if "save" in c.key.lower()]


_FILE_TESTS = frozenset({"exists", "is_file", "isfile", "isdir", "is_dir"})


def missing_arm(node: ast.AST, arm: bool) -> bool:
    """The arm of `if not os.path.exists(path):` (or the `else` of `if path.is_file():`)
    that runs where the file is not there."""
    test = getattr(node, "test", None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, arm = test.operand, not arm
    return (
        not arm and isinstance(test, ast.Call) and names.last_identifier(test.func) in _FILE_TESTS
    )


def saves_a_sample_cache(facts: ScriptFacts, save: CallSite) -> bool:
    """`if os.path.exists(spec_path): load else: compute; torch.save(spec, spec_path)` in a
    method that a map-style dataset's `__getitem__` reaches, the path built from the method's
    own parameter (vits' and so-vits-svc's `get_audio(filename)`: `filename.replace(".wav",
    ".spec.pt")`): a file per sample, written where it is missing by the rank the sampler
    gave that sample to."""
    function = save.ctx.function
    info = facts.classes.get(save.ctx.class_name or "")
    path = save.argument(1, "f")
    if function is None or info is None or path is None or "__getitem__" not in info.methods:
        return False
    if not any(missing_arm(b.node, b.arm) for b in save.ctx.branches):
        return False
    if function.name not in _methods_reached(info, "__getitem__"):
        return False
    sources = _names_behind(facts, path, function)
    return bool(sources & set(function.params[1:]))


def _methods_reached(info: ClassInfo, start: str, hops: int = 3) -> set[str]:
    """Methods of the class that `start` calls through `self.method(...)`, a few calls deep."""
    found, frontier = {start}, [start]
    for _ in range(hops):
        reached = []
        for name in frontier:
            method = info.methods.get(name)
            for node in ast.walk(method.node) if method is not None else ():
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and names.dotted(node.func.value) == "self"
                    and node.func.attr in info.methods
                    and node.func.attr not in found
                ):
                    found.add(node.func.attr)
                    reached.append(node.func.attr)
        frontier = reached
    return found


def _names_behind(facts: ScriptFacts, value: ast.AST, function: Function) -> set[str]:
    """The names a value is built from, through the function's own assignments (a few back)."""
    found: set[str] = set()
    frontier = [value]
    for _ in range(_NAME_HOPS + 1):
        reached = []
        for node in frontier:
            for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - found:
                found.add(name)
                reached += [
                    a.value
                    for a in facts.assignments_by_target.get(name, ())
                    if a.ctx.function is function and a.value is not None
                ]
        frontier = reached
    return found


_NAME_HOPS = 3  # path = join(d, name); name = f"part_{rank_save}.pkl"; rank_save = get_rank()


def mentions_rank(facts: ScriptFacts, node: ast.AST, hops: int = _NAME_HOPS) -> bool:
    """A path or message built from the rank: f"ckpt_{rank}.pt", os.path.join(d, str(rank)),
    directly or through the names it is built from, a few assignments back."""
    if any(is_rank_like(n) for n in ast.walk(node)):
        return True
    if hops <= 0:
        return False
    for name in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
        for assignment in facts.assignments_by_target.get(name, ()):
            if assignment.element or assignment.value is None:
                continue
            value = element(assignment.value, assignment.index)  # a, rank = x, get_rank()
            if value is not None and value is not node and mentions_rank(facts, value, hops - 1):
                return True
    return False


_LOG_SETUPS = ("basicConfig", "setLevel", "disable", "dictConfig")
_LOG_CONFIGURATION = frozenset({*_LOG_SETUPS, "fileConfig", "addHandler", "log_to_stderr"})
# A project's own set-up helper (setup_logger, init_logger_dist): trusted to know the rank.
_LOG_HELPER = re.compile(r"(setup|init|config|configure|get_root)_?log", re.I)


def logging_configured_here(facts: ScriptFacts) -> bool:
    """The file sets logging up itself (the standard library's calls); otherwise who prints
    what is decided elsewhere (often per rank: a launcher or an entry script not in view)."""
    return any(facts.calls_by_key.get(key) for key in _LOG_CONFIGURATION)


def logging_quiet(facts: ScriptFacts) -> bool:
    """Whether logging off rank 0 is decided elsewhere or silenced: the file does not set
    logging up itself, or a file of its program sets it up per rank (msn: main.py sets the
    root logger to ERROR off rank 0 for the trainer module it imports)."""
    return not logging_configured_here(facts) or any(
        logging_is_rank_aware(f) for f in program_files(facts) if f.is_python
    )


def logging_is_rank_aware(facts: ScriptFacts) -> bool:
    """logging configured per rank: basicConfig/setLevel/dictConfig under a rank guard, in a
    function only some ranks call (REPA's create_logger, called under
    `if accelerator.is_main_process:`: the other ranks keep the default WARNING level), or
    with the rank, or by the project's own set-up helper (setup_logger, init_logger_dist)."""
    if any(_LOG_HELPER.search(site.key) for site in facts.calls if "log" in site.key.lower()):
        return True
    graph = facts.project.graph
    for key in _LOG_SETUPS:
        for call in facts.calls_by_key.get(key, ()):
            if call.ctx.guard is not None or graph.runs_on_some_ranks_only(call.ctx):
                return True
            values: list[ast.AST] = [*call.node.args, *(kw.value for kw in call.node.keywords)]
            used = {n.id for v in values for n in ast.walk(v) if isinstance(n, ast.Name)}
            for name in used:  # level = INFO if rank == 0 else WARNING; {"level": level}
                values += [a.value for a in facts.assignments_by_target.get(name, ())]
            if any(
                is_rank_like(n) or is_main_process_predicate(n) for v in values for n in ast.walk(v)
            ):
                return True
    return False


def paired_collectives(facts: ScriptFacts) -> set[tuple[Function | None, str | None]]:
    """(function, collective) called under both a rank-0 and a non-rank-0 guard in one function:
    the "first process does the work, the others wait" pattern, where every rank calls it once."""
    sides: dict[tuple[Function | None, str | None], set[str]] = {}
    for call in facts.calls_to(*names.COLLECTIVES):
        if call.ctx.guard is not None:
            key = (call.ctx.function, facts.resolve(call))
            sides.setdefault(key, set()).add(call.ctx.guard.polarity)
    return {key for key, seen in sides.items() if seen >= {ZERO, NONZERO}}


def collective_helpers(facts: ScriptFacts) -> list[tuple[CallSite, str]]:
    """Calls, under a rank guard, of a function of the tree that runs a collective outside any
    rank guard of its own (directly or a few calls down)."""
    graph = facts.project.graph
    reach = graph.reaching("collective", _unguarded_collective, _unguarded)
    found = []
    for site in facts.calls:
        if site.ctx.guard is None or matched_in_other_arm(site):
            continue
        for target in graph.targets(facts, site):
            if target in reach and target is not site.ctx.function:
                found.append((site, _first_collective(graph, target)))
                break
    return found


def matched_in_other_arm(site: CallSite) -> bool:
    """`if rank == src: broadcast(a); broadcast(b)  else: broadcast(a); broadcast(b)`: the
    rank guard is an if/else whose other arm makes as many calls of the same name, so every
    rank joins each collective (the sender in one arm, the receivers in the other)."""
    guard = site.ctx.guard
    node = guard.node if guard is not None else None
    if not isinstance(node, ast.If) or not node.orelse:
        return False
    arms = [_call_names(node.body), _call_names(node.orelse)]
    key = names.last_identifier(site.node.func)
    return key is not None and arms[0][key] == arms[1][key] > 0


def _call_names(statements: list[ast.stmt]) -> Counter[str]:
    found: Counter[str] = Counter()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                name = names.last_identifier(node.func)
                if name:
                    found[name] += 1
    return found


_COLLECTIVE_KEYS = frozenset(name.rsplit(".", 1)[-1] for name in names.COLLECTIVES)


def _unguarded_collective(facts: ScriptFacts, site: CallSite) -> bool:
    return (
        site.ctx.guard is None
        and site.key in _COLLECTIVE_KEYS
        and facts.resolve(site) in names.COLLECTIVES
    )


def _unguarded(facts: ScriptFacts, site: CallSite) -> bool:
    return site.ctx.guard is None


def _first_collective(graph, function: Function) -> str:  # type: ignore[no-untyped-def]
    for facts, site in graph.sites_with(function, "collective", _unguarded_collective, _unguarded):
        if _unguarded_collective(facts, site):
            return f"{names.dotted(site.node.func) or 'a collective'}()"
    return "a collective"


# Methods that hand back the module they are called on: `model = model.train()` keeps it.
_RETURNS_SELF = frozenset(
    {"train", "eval", "to", "cuda", "float", "half", "bfloat16", "requires_grad_"}
)


def wrapped_model_helpers(facts: ScriptFacts) -> list[tuple[CallSite, str]]:
    """Calls, under a rank guard and outside no_grad, of a plain function of the tree handed
    the DDP-wrapped model, whose body runs that parameter forward outside no_grad (doctr's
    `if rank == 0 and args.find_lr: record_lr(model, ...)`, an LR finder that trains): the
    forward's gradient all-reduce waits for the ranks that skipped the branch. The helper's
    parameter name for each."""
    from ddp_doctor.script.flow import flow_of  # flow's region reads rank helpers from here

    flow = flow_of(facts)
    graph = facts.project.graph
    found = []
    for site in facts.calls:
        if site.ctx.guard is None or site.ctx.no_grad or not (site.node.args or site.node.keywords):
            continue
        targets = [t for t in graph.targets(facts, site) if t.class_name is None]
        if not targets or matched_in_other_arm(site):
            continue
        handed = [
            (index, keyword)
            for index, keyword, value in _arguments(site)
            if flow.holds_wrapped_model(value, site.ctx, site.node)
        ]
        if not handed:
            continue
        for target in targets:
            parameter = _runs_forward(facts, target, handed)
            if parameter is not None:
                found.append((site, parameter))
                break
    return found


def _arguments(site: CallSite) -> list[tuple[int | None, str | None, ast.expr]]:
    positional = [
        (i, None, a) for i, a in enumerate(site.node.args) if not isinstance(a, ast.Starred)
    ]
    return positional + [(None, k.arg, k.value) for k in site.node.keywords if k.arg]


def _runs_forward(
    facts: ScriptFacts, target: Function, handed: list[tuple[int | None, str | None]]
) -> str | None:
    if target.class_name is not None or target.decorators:
        return None  # a method's `self` shifts the arguments; a decorator may add no_grad
    params = target.params
    wanted = {params[i] if i is not None and i < len(params) else k for i, k in handed}
    try:
        owner = facts.project.owner(target)
    except KeyError:
        return None
    for name in sorted(p for p in wanted if p):
        if _rebound(owner, target, name):
            continue
        if any(
            site.ctx.function is target
            and not site.ctx.no_grad
            and isinstance(site.node.func, ast.Name)
            and site.node.func.id == name
            for site in owner.calls
        ):
            return name
    return None


def _rebound(facts: ScriptFacts, function: Function, name: str) -> bool:
    """The parameter is given another value in the function (`model = model.module`)."""
    for assignment in facts.assignments_by_target.get(name, ()):
        if assignment.ctx.function is not function:
            continue
        value = assignment.value
        keeps = (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _RETURNS_SELF
            and names.dotted(value.func.value) == name
        )
        if not keeps:
            return True
    return False
