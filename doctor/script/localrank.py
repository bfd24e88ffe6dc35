"""Where a GPU index comes from an argparse --local_rank (DDP103, DDP104): the option's
declarations in a program, the reads of LOCAL_RANK, the placements whose index is the option,
and which file of a program reports them (the parsing file, an entry point, never an unused
helper's copy)."""

from __future__ import annotations

import ast
from typing import NamedTuple

from ddp_doctor.script import names
from ddp_doctor.script.evidence import is_entry_point, program_files, unused_helper
from ddp_doctor.script.facts import CallSite, Context, ScriptFacts
from ddp_doctor.script.hits import spelled_like
from ddp_doctor.script.origins import ATTRIBUTE, CALL, OPTION, Origin
from ddp_doctor.script.placement import device_sources
from ddp_doctor.script.values import Values

LOCAL_RANK_OPTIONS = ("--local_rank", "--local-rank")
PLACING_KEYS = frozenset({"set_device", "device", "cuda", "to", "DistributedDataParallel"})


def option_strings(call: CallSite) -> list[str]:
    return [
        a.value for a in call.node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
    ]


def local_rank_from_env(facts: ScriptFacts) -> bool:
    """A read of LOCAL_RANK. `os.environ["LOCAL_RANK"] = str(proc_id % num_gpus)` sets it for
    others (a SLURM branch) and reads nothing: the walker also lists the assigned subscript
    as a read, and the quoted name found in the source is the one set."""
    if facts.calls_by_key.get("get_node_local_rank"):
        return True
    accesses = [access for access in facts.env if access.name == "LOCAL_RANK"]
    written = {  # `os.environ["LOCAL_RANK"] = ...`; setdefault() also reads it
        id(access.node)
        for access in accesses
        if access.writes and isinstance(access.node, ast.Subscript)
    }
    if any(not access.writes and id(access.node) not in written for access in accesses):
        return True
    quoted = facts.source.count("'LOCAL_RANK'") + facts.source.count('"LOCAL_RANK"')
    return quoted > len(written)


def reported_by_parser(facts: ScriptFacts, source: Source, values: Values) -> bool:
    """A helper's placement from another file's option, when that file, or an entry point of
    the program, places with it (contriever's train.py `device_ids=[opt.local_rank]` beside
    src/slurm.py's set_device, the option parsed in src/options.py): that file reports it. An
    entry point of its own (eval.py running `from train import parse_args`) is another program
    and reports its own placements."""
    if source.owner is facts or is_entry_point(facts):
        return False
    if _places_from_option(source.owner, values):
        return True
    return any(
        other is not facts and is_entry_point(other) and _places_from_option(other, values)
        for other in program_files(facts)
        if other.is_python
    )


def never_runs(facts: ScriptFacts, call: CallSite, values: Values) -> bool:
    """A placement in a helper module's function that nothing of the tree calls or names
    (CodeT5's configs.set_dist), while an entry point of the program places from the option
    itself: that entry point reports what the user runs; the helper's copy never runs."""
    if not unused_helper(facts, call.ctx.function):
        return False
    return any(
        other is not facts and is_entry_point(other) and _places_from_option(other, values)
        for other in program_files(facts)
        if other.is_python
    )


def _places_from_option(facts: ScriptFacts, values: Values) -> bool:
    declares = bool(declared(facts) & set(LOCAL_RANK_OPTIONS))
    return bool(placements_from_option(facts, values, declares))


def declared_in_tree(facts: ScriptFacts) -> bool:
    """Whether some file of the tree declares a --local_rank option at all."""
    graph = facts.project.graph
    cached = graph.__dict__.get("_declares_local_rank")
    if cached is None:
        cached = any(declared(f) & set(LOCAL_RANK_OPTIONS) for f in graph.files())
        graph.__dict__["_declares_local_rank"] = cached
    return cached


def _declared_for(owner: ScriptFacts) -> bool:
    """The file that parses the arguments declares --local_rank, itself or through a helper
    of its program that adds options to the parser it is handed (`add_gpu_params(parser)`)."""
    options = set(LOCAL_RANK_OPTIONS)
    return bool(declared(owner) & options) or any(
        declared(f) & options for f in program_files(owner) if f.is_python
    )


def declared(facts: ScriptFacts) -> set[str]:
    return {o for d in declarations(facts) for o in option_strings(d.call)}


class Declaration(NamedTuple):
    call: CallSite  # `parser.add_argument(...)`, or `arg(...)` after `arg = parser.add_argument`
    parser: ast.expr | None  # the parser the option is added to, as written


def declarations(facts: ScriptFacts) -> list[Declaration]:
    """The file's add_argument calls (once per file), also through a bound method held in a
    name of the same function: `arg = parser.add_argument`, then `arg("--local_rank", ...)`
    (selimsef's dfdc_deepfake_challenge and the Kaggle pipelines built on it)."""
    cached = facts.__dict__.get("_argument_declarations")
    if cached is None:
        found = [Declaration(c, c.receiver) for c in facts.methods_called("add_argument")]
        seen = {id(d.call) for d in found}
        for alias, parser, scope in _bound_add_argument(facts):
            for call in facts.calls_by_key.get(alias, ()):
                func = call.node.func
                named = isinstance(func, ast.Name) and func.id == alias
                if named and call.ctx.function is scope and id(call) not in seen:
                    seen.add(id(call))
                    found.append(Declaration(call, parser))
        cached = facts.__dict__["_argument_declarations"] = found
    return cached


def _bound_add_argument(facts: ScriptFacts) -> list[tuple[str, ast.expr, object]]:
    """`arg = parser.add_argument`: the name, the parser and the function it is bound in."""
    return [
        (a.target, a.value.value, a.ctx.function)
        for a in facts.assignments
        if isinstance(a.value, ast.Attribute)
        and a.value.attr == "add_argument"
        and a.target.isidentifier()
        and not a.index
        and not a.element
    ]


class Source(NamedTuple):
    owner: ScriptFacts  # the file that parses the option
    where: str  # "" for this file's own option, " (parsed in FILE)" for another file's


def placements_from_option(
    facts: ScriptFacts, values: Values, declares_here: bool
) -> list[tuple[CallSite, Source]]:
    """The file's GPU placements whose index is an argparse --local_rank (once per file)."""
    key = "_local_rank_placements" if declares_here else "_local_rank_placements_elsewhere"
    cached = facts.__dict__.get(key)
    if cached is None:
        cached = [
            (call, source)
            for name in PLACING_KEYS
            for call in facts.calls_by_key.get(name, ())
            if (source := _local_rank_source(facts, values, call, declares_here)) is not None
        ]
        facts.__dict__[key] = cached
    return cached


def _local_rank_source(
    facts: ScriptFacts, values: Values, call: CallSite, declares_here: bool
) -> Source | None:
    """Where the call's GPU comes from, when that is an argparse --local_rank."""
    for value in [*call.node.args, *(kw.value for kw in call.node.keywords)]:
        for origin in device_sources(facts, values, value, call.ctx):
            if origin.name != "local_rank":
                continue
            if origin.kind == OPTION and origin.facts is not None:
                owner = origin.facts
                if owner is facts and declares_here:
                    return Source(facts, "")
                declared = _declared_for(owner)
                if owner is not facts and declared and not local_rank_from_env(owner):
                    return Source(owner, f" (parsed in {spelled_like(owner.path, facts.path)})")
            elif origin.kind == ATTRIBUTE and declares_here:
                return Source(facts, "")
        for origin in device_sources(facts, values, value, call.ctx):
            if declares_here and _config_copy(facts, values, origin, call.ctx):
                return Source(facts, "")
    return None


_NAMESPACE_PARSERS = frozenset({"parse_args", "parse_known_args"})


def _config_copy(facts: ScriptFacts, values: Values, origin: Origin, ctx: Context) -> bool:
    """`config.LOCAL_RANK` of a config built by a call handed the parsed namespace
    (`config = get_config(args)`), in a program that reads LOCAL_RANK nowhere: the builder
    copies the option into the attribute spelled like it (Swin Transformer's config.py:
    `config.LOCAL_RANK = args.local_rank`; SimMIM, RepVGG, InternImage). The lower-case
    spelling is the option's own name and counts anyway (an ATTRIBUTE origin above)."""
    if origin.kind != ATTRIBUTE or origin.name == "local_rank":
        return False
    if origin.name.lower() != "local_rank" or not isinstance(origin.node, ast.Attribute):
        return False
    if any(local_rank_from_env(f) for f in program_files(facts) if f.is_python):
        return False
    if _copied_in_view(facts, values, origin.name):
        return True
    return any(
        base.kind == CALL and base.call is not None and _handed_namespace(values, base)
        for base in values.origins(facts, origin.node.value, ctx)
    )


def _copied_in_view(facts: ScriptFacts, values: Values, attribute: str) -> bool:
    """A builder of the program stores the option under that attribute itself
    (`config.LOCAL_RANK = args.local_rank` in a config.py that is in view), once per file."""
    known = facts.__dict__.setdefault("_local_rank_copies", {})
    if attribute not in known:
        known[attribute] = _stores_option(facts, values, attribute)
    return known[attribute]


def _stores_option(facts: ScriptFacts, values: Values, attribute: str) -> bool:
    return any(
        assignment.target.rsplit(".", 1)[-1] == attribute
        and any(
            o.kind == OPTION and o.name == "local_rank"
            for o in values.origins(other, assignment.value, assignment.ctx)
        )
        for other in program_files(facts)
        if other.is_python
        for assignment in other.assignments
    )


def _handed_namespace(values: Values, built: Origin) -> bool:
    """The config-building call takes the namespace argparse parsed as an argument."""
    owner, call = built.facts, built.call
    site = owner.site_of.get(id(call)) if owner is not None and call is not None else None
    if site is None:
        return False
    arguments = [*site.node.args, *(kw.value for kw in site.node.keywords)]
    return any(
        parsed.kind == CALL
        and parsed.call is not None
        and names.last_identifier(parsed.call.func) in _NAMESPACE_PARSERS
        for argument in arguments
        for parsed in values.origins(owner, argument, site.ctx)
    )
