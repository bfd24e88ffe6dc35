"""Which log calls of a loop are reports of one event rather than a line per step (DDP119):
a NaN or a missing gradient, an error before the process exits, a message before the loop
ends, an `except` block, a branch that turns itself off, a pass over a mapping's entries, a
download that runs only where its file is missing; and what kind of log call a site is
(`log_kind`: print, logging, tqdm, wandb, tensorboard, or none: print into a file)."""

from __future__ import annotations

import ast
import os
import re

from ddp_doctor.script import names
from ddp_doctor.script.bars import displays_once, is_progress_bar
from ddp_doctor.script.evidence import imported_closure, is_entry_point, program_files
from ddp_doctor.script.facts import SINGLE, ZERO, Branch, CallSite, Context, ScriptFacts
from ddp_doctor.script.guards import classify
from ddp_doctor.script.onceloops import dispatches_on_names, runs_once, splits_a_setting
from ddp_doctor.script.rankflow import contains, missing_arm
from ddp_doctor.script.region import distributed_region

_ANOMALY_CHECKS = frozenset({"isnan", "isinf", "isfinite"})


def is_event_report(ctx: Context) -> bool:
    """Under `if torch.isnan(loss):` or `if p.grad is None:`, or in a branch that ends the
    process (`print("ERROR: ..."); exit(1)`): a rare event's report, printed by the rank it
    happened on."""
    innermost = _innermost_arm(ctx)
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is None:
            continue
        block = getattr(branch.node, "body" if branch.arm else "orelse", None)
        if branch is innermost and isinstance(block, list) and block and _stops(block[-1]):
            return True
        if not branch.arm:
            continue
        for node in ast.walk(test):
            if isinstance(node, ast.Call) and names.last_identifier(node.func) in _ANOMALY_CHECKS:
                return True
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.ops[0], ast.Is)
                and names.last_identifier(node.left) == "grad"
            ):
                return True
    return False


def _innermost_arm(ctx: Context) -> Branch | None:
    """The innermost arm that holds the call, passing over the early exits on the way to it
    (`if not backend.has_backend(): raise ...` before the print: its empty false arm)."""
    for branch in reversed(ctx.branches):
        if branch.arm or getattr(branch.node, "orelse", None):
            return branch
    return None


_CALLERS_UP = 4  # download_file <- download <- iterate_examples: callers followed up


def only_when_missing(facts: ScriptFacts, ctx: Context, depth: int = _CALLERS_UP) -> bool:
    """In the arm of a test that a file is missing (`if not os.path.exists(path):`, the
    `else` of `if path.is_file():`), here or on every call path a few callers up: a cache
    filled once (build-nanogpt's hellaswag.py: the download's progress bar runs only when the
    data file is not there yet), not a line per step."""
    if any(missing_arm(branch.node, branch.arm) for branch in ctx.branches):
        return True
    if ctx.function is None or depth <= 0:
        return False
    edges = [e for e in facts.project.graph.callers(ctx.function) if not e.handed]
    return bool(edges) and all(only_when_missing(e.facts, e.site.ctx, depth - 1) for e in edges)


def writes_to_a_file(call: CallSite) -> bool:
    """`print(row, end=",", file=f)` with f an opened file (msn's CSVLogger): a line of a
    file, not of the console; `file=sys.stderr` (or a name for it) is still the console."""
    target = call.keyword("file")
    if target is None or (isinstance(target, ast.Constant) and target.value is None):
        return False
    text = names.dotted(target) or ""
    return "std" not in text.rsplit(".", 1)[-1].lower() and not text.startswith("sys.")


def in_handler(facts: ScriptFacts, call: CallSite) -> bool:
    """In an `except` block: a failure's report, printed by the rank it happened on."""
    scope = call.ctx.function.node if call.ctx.function is not None else facts.tree
    return scope is not None and any(
        isinstance(node, ast.ExceptHandler) and contains(node, call.node)
        for node in ast.walk(scope)
    )


_EXITS = frozenset({"exit", "_exit", "quit", "abort"})
_ENTRIES = frozenset({"items", "keys", "values", "vars"})


def in_a_loop_of_steps(facts: ScriptFacts, ctx: Context) -> bool:
    """Inside a loop of the function (or module) that is no pass over a mapping's entries."""
    scope = ctx.function.node if ctx.function is not None else facts.tree
    return any(
        not over_entries(loop.node, scope) and not runs_once(loop.node, scope) for loop in ctx.loops
    )


def over_entries(loop: ast.For | ast.AsyncFor | ast.While, scope: ast.AST | None = None) -> bool:
    """`for k, v in kwargs.items():`, `for name in vars(args):`, `for k in d: ... d[k]`: a
    pass over a mapping's entries (settings, a report) runs once, not once per step; so does
    a pass over a list that the function (`scope`) built of a configuration's keys
    (`networks = [k for k in opt.keys() if k.startswith("network_")]`, `sorted(cfg.keys())`).
    A list of another mapping's keys is a list of items (a dataset's cases), and a pass over
    a model's parameters is no pass over settings either: a line per item or parameter is as
    many lines as steps."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    source = loop.iter
    if isinstance(source, ast.Call) and names.last_identifier(source.func) in _ENTRIES:
        return True
    if _of_configuration_keys(source):
        return True
    if isinstance(source, ast.Name) and scope is not None and _bound_to_keys(source.id, scope):
        return True
    if splits_a_setting(loop, _CONFIGURATION):
        return True
    return _keys_looked_up(loop) or dispatches_on_names(loop)


_COPIES = frozenset({"list", "sorted", "tuple", "set", "reversed"})
_CONFIGURATION = re.compile(
    r"_?(opts?|options?|cfg|conf|config|configs|args|kwargs|hparams|hp|settings)", re.IGNORECASE
)


def _of_configuration_keys(value: ast.expr) -> bool:
    """`sorted(opt.keys())`, `[k for k in opt["path"].keys() if ...]`, `list(vars(args))`."""
    if isinstance(value, ast.ListComp | ast.SetComp | ast.GeneratorExp):
        return _of_configuration_keys(value.generators[0].iter)
    if not isinstance(value, ast.Call):
        return False
    called = names.last_identifier(value.func)
    if called == "vars":
        return True
    if called in _ENTRIES and isinstance(value.func, ast.Attribute):
        root = _root_name(value.func.value)
        return root is not None and _CONFIGURATION.fullmatch(root) is not None
    return (
        isinstance(value.func, ast.Name)
        and called in _COPIES
        and bool(value.args)
        and _of_configuration_keys(value.args[0])
    )


def _root_name(value: ast.expr) -> str | None:
    """The first name of `opt["path"]`, `self.cfg.train`: opt, cfg (`self` skipped)."""
    chain = names.member_chain(value)
    return chain[0] if chain else None


def _bound_to_keys(name: str, scope: ast.AST) -> bool:
    """Every assignment of `name` in the scope is a list of a configuration's keys."""
    values = [
        node.value
        for node in ast.walk(scope)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    return bool(values) and all(_of_configuration_keys(value) for value in values)


def _keys_looked_up(loop: ast.For | ast.AsyncFor) -> bool:
    """`for k in data.datasets: print(k, data.datasets[k])`: the loop variable indexes the
    thing it iterates, which is a mapping."""
    iterated = names.dotted(loop.iter)
    target = loop.target.id if isinstance(loop.target, ast.Name) else None
    if iterated is None or target is None:
        return False
    return any(
        isinstance(node, ast.Subscript)
        and names.dotted(node.value) == iterated
        and isinstance(node.slice, ast.Name)
        and node.slice.id == target
        for statement in loop.body
        for node in ast.walk(statement)
    )


def _stops(statement: ast.stmt) -> bool:
    """`raise ...`, `exit(1)`, `sys.exit(...)`, `os._exit(...)`: the process ends here;
    `break` or `return`: the loop ends (the message is printed once)."""
    if isinstance(statement, (ast.Raise, ast.Break, ast.Return)):
        return True
    call = statement.value if isinstance(statement, ast.Expr) else None
    return isinstance(call, ast.Call) and names.last_identifier(call.func) in _EXITS


def turns_itself_off(facts: ScriptFacts, ctx: Context) -> bool:
    """`if need_profiling: log(...); need_profiling = False`: a branch that turns itself off,
    so the loop around it logs once."""
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if test is None or not branch.arm:
            continue
        for name in {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}:
            for assignment in facts.assignments_by_target.get(name, ()):
                value = assignment.value
                inside = any(b.node is branch.node and b.arm for b in assignment.ctx.branches)
                if inside and isinstance(value, ast.Constant) and value.value in (False, None):
                    return True
    return False


def opted_in_per_rank(ctx: Context) -> bool:
    """`if rank == 0 or not cfg.wandb.rank_zero_only:` (alone or as one part of an `and`):
    rank 0, or every rank where the configuration asks for it (OLMo's W&B set-up). The rank
    was thought of: a choice."""
    for branch in ctx.branches:
        test = getattr(branch.node, "test", None)
        if branch.arm and test is not None and any(_rank_zero_or(p) for p in _conjuncts(test)):
            return True
    return False


def _conjuncts(test: ast.expr) -> list[ast.expr]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in _conjuncts(value)]
    return [test]


def _rank_zero_or(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.BoolOp)
        and isinstance(test.op, ast.Or)
        and any(classify(part) == ZERO for part in test.values)
    )


# The keywords of the builtin print; any other (`print(..., force=True)`, `clean=True`) means
# the program's print is its own (deit's setup_for_distributed, VAR's utils/misc.py)
_BUILTIN_PRINT_KEYWORDS = frozenset({"sep", "end", "file", "flush"})


def print_replaced(facts: ScriptFacts) -> bool:
    """print called with a keyword the builtin print does not take: the program replaced
    builtins.print (in a file the tree may not hold) with one that silences it off rank 0
    unless forced."""
    return any(
        isinstance(call.node.func, ast.Name)
        and any(
            k.arg is not None and k.arg not in _BUILTIN_PRINT_KEYWORDS for k in call.node.keywords
        )
        for call in facts.calls_by_key.get("print", ())
    )


def print_setup_files(facts: ScriptFacts) -> list[ScriptFacts]:
    """Where the program may set print up for this file: its program's files and, for a helper
    that no entry point of the tree reaches (the entry point's import names a path the tree
    does not hold: SlowFast's run_net.py imports vision.fair.slowfast.tools.train_net), every
    file that imports it, directly or through others, with their own imports."""
    found = {id(f): f for f in program_files(facts)}
    importers = _importers(facts)
    if any(is_entry_point(f) for f in importers):
        return list(found.values())
    for importer in importers:
        for mate in imported_closure(importer):
            found.setdefault(id(mate), mate)
    return list(found.values())


def _importers(facts: ScriptFacts) -> list[ScriptFacts]:
    """The files of the tree whose imports reach this one (itself left out); once per tree."""
    project = facts.project
    cached = project.__dict__.get("_importers")
    if cached is None or cached[0] != len(project.files):
        table: dict[int, list[ScriptFacts]] = {}
        for importer in project.files.values():
            for module in imported_closure(importer):
                if module is not importer:
                    table.setdefault(id(module), []).append(importer)
        cached = project.__dict__["_importers"] = (len(project.files), table)
    return cached[1].get(id(facts), [])


_PROCESS_STARTERS = frozenset({"subprocess.Popen", "subprocess.run", "subprocess.call"})
_INTERPRETER = frozenset({"sys.executable", "python", "python3"})


def launcher_redirects_stdout(facts: ScriptFacts) -> bool:
    """A Python launcher of the tree starts the interpreter once per process in a loop and
    hands each its own `stdout=` (tacotron2's multiproc.py: None for rank 0, a log file for
    the others): the program's prints reach the terminal from one rank. A launcher whose
    command names a script must name this one. stderr (logging, tqdm) is not covered."""
    project = facts.project
    cached = project.__dict__.get("_stdout_launchers")
    if cached is None or cached[0] != len(project.files):
        found = [
            site
            for owner in project.files.values()
            if owner.is_python
            for key in ("Popen", "run", "call")
            for site in owner.calls_by_key.get(key, ())
            if _redirecting_launch(owner, site)
        ]
        cached = project.__dict__["_stdout_launchers"] = (len(project.files), found)
    here = os.path.basename(facts.path)
    return any(_names_script(site, here) for site in cached[1])


def _redirecting_launch(owner: ScriptFacts, site: CallSite) -> bool:
    if not site.ctx.loops or owner.resolve(site) not in _PROCESS_STARTERS:
        return False
    stdout = site.keyword("stdout")
    if stdout is None or (isinstance(stdout, ast.Constant) and stdout.value is None):
        return False
    command = site.argument(0, "args")
    return command is not None and any(
        names.dotted(node) in _INTERPRETER
        or (isinstance(node, ast.Constant) and node.value in _INTERPRETER)
        for node in ast.walk(command)
    )


def _names_script(site: CallSite, here: str) -> bool:
    """The command names no script (the arguments are passed through) or names this file."""
    command = site.argument(0, "args")
    scripts = [
        node.value.rsplit("/", 1)[-1]
        for node in ast.walk(command)  # type: ignore[arg-type]
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.endswith(".py")
    ]
    return not scripts or here in scripts


LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "log"})
# A project's helper that silences print off the main process, called where its module may be
# out of view: setup_for_distributed(is_master) (DeiT, DETR), suppress_output(rank),
# _restrict_print_to_main_process() (dinov2), setup_print(...).
SILENCES_PRINT = re.compile(
    r"_?(setup_for_distributed|suppress_output|(setup|suppress|restrict|disable|silence)_?\w*print\w*)"
)
LOG_KEYS = ("print", *sorted(LOG_METHODS), "init", "tqdm", "trange", "SummaryWriter")


def log_kind(
    facts: ScriptFacts, call: CallSite, quiet_print: bool, quiet_logging: bool
) -> str | None:
    func = call.node.func
    graph = facts.project.graph
    region = distributed_region(graph)

    def in_loop(ctx: Context) -> bool:  # the loop itself, or a helper it calls (display())
        return in_a_loop_of_steps(facts, ctx) or any(
            in_a_loop_of_steps(edge.facts, edge.site.ctx)
            for edge in (graph.callers(ctx.function) if ctx.function is not None else ())
            if not edge.handed and edge.caller in region and edge.site.ctx.launch != SINGLE
        )

    if call.key == "print" and isinstance(func, ast.Name):
        quiet = quiet_print or writes_to_a_file(call)  # print(row, file=f): a file's line
        return "print" if not quiet and in_loop(call.ctx) else None
    if call.key in LOG_METHODS and call.receiver is not None:
        receiver = names.dotted(call.receiver) or ""
        if "log" not in receiver.rsplit(".", 1)[-1].lower() or quiet_logging:
            return None
        if not in_loop(call.ctx):
            return None
        origin = facts.qualname(call.receiver) or "logging"
        return "logging" if origin.startswith("logging") else None  # LOGGER from elsewhere: its
        # configuration (often per rank) is not in this file
    qualified = facts.qualname(func) or ""
    if qualified.startswith("wandb.") and call.key in ("init", "log"):
        return "wandb"
    if is_progress_bar(qualified):
        if call.keyword("disable") is not None or (displays_once(call) and not in_loop(call.ctx)):
            return None  # tqdm(None, desc=..., total=n, initial=n): a line of results, a print
        return "tqdm"
    if qualified.endswith("SummaryWriter"):
        return "tensorboard"
    return None
