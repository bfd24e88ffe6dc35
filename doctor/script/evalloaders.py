"""Evaluation loaders built by a loader factory of the tree (DDP114's second half).

`valid_loader = setup_loader(valid_dataset, ...)` where setup_loader, a few calls down,
builds a padding DistributedSampler. The call is judged where the evaluation context is
visible: its target, its dataset or split argument, or the `val_dataloader()` it sits in.
A factory that builds the sampler only on a path the call rules out (`rank=-1`,
`shuffle=False` taking the hand-sharded branch) is left alone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ddp_doctor.registry import Hit
from ddp_doctor.script import names
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, Function, ScriptFacts, text_of
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.hits import hit
from ddp_doctor.script.origins import CALL, INSTANCE
from ddp_doctor.script.samplers import (
    is_own_padding_sampler,
    is_padding_sampler_class,
    looks_like_eval,
)

_DATA_KEYWORDS = ("dataset", "data", "split", "path", "name", "mode")
_LOADERS = (names.DATA_LOADER, names.DISTRIBUTED_SAMPLER)


def builds_padding_sampler(facts: ScriptFacts, site: CallSite) -> bool:
    """torch's DistributedSampler, or the tree's own of its family that pads."""
    torch_sampler = site.key == "DistributedSampler"
    if torch_sampler and facts.resolve(site) != names.DISTRIBUTED_SAMPLER:
        torch_sampler = False
    if not (torch_sampler or is_own_padding_sampler(facts, site) or _sampler_maker(facts, site)):
        return False
    drop = site.keyword("drop_last")
    return not (isinstance(drop, ast.Constant) and drop.value is True)


_MAKER = re.compile(r"^_?(create|build|make|get)_(\w+_)?sampler$")


def _sampler_maker(facts: ScriptFacts, site: CallSite) -> bool:
    """`sampler = utils.create_sampler(dataset, shuffle, cfg)`, then `DataLoader(...,
    sampler=sampler)`, in a module that imports torch's DistributedSampler: a helper out of
    view, named for making a sampler, whose sampler is torch's (TimeSformer's loader.py,
    whose datasets/utils.py builds it; the module tests `isinstance(sampler,
    DistributedSampler)` to call set_epoch on it)."""
    if not _MAKER.match(site.key) or not _imports_distributed_sampler(facts):
        return False
    if facts.project.definition(facts, site.node.func, site.ctx) is not None:
        return False  # in view: judged by what it builds
    held = flow_of(facts).target_of(site.node)
    return held is not None and any(
        loader.ctx.function is site.ctx.function
        and names.dotted(loader.argument(2, "sampler")) == held  # type: ignore[arg-type]
        for loader in facts.calls_to(names.DATA_LOADER)
        if loader.argument(2, "sampler") is not None
    )


def _imports_distributed_sampler(facts: ScriptFacts) -> bool:
    return any(
        names.fold(qualname) == names.DISTRIBUTED_SAMPLER
        for qualname in facts.imports.names.values()
    )


def evaluation_factory_calls(facts: ScriptFacts) -> Iterator[tuple[CallSite, Function]]:
    """Calls in this file that build an evaluation loader with a padding factory."""
    graph = facts.project.graph
    factories = graph.reaching("padding-sampler", builds_padding_sampler)
    flow = flow_of(facts)
    for site in facts.calls:
        for target in graph.targets(facts, site):
            if target not in factories or looks_like_eval(target.name):
                continue  # construct_test_loader(): judged inside, where it calls the factory
            if _per_dataset_flag(facts.project.owner(target), target) is not None:
                continue  # create_sampler(datasets, [True, False]): per_dataset_factory_calls
            if not _evaluation_call(flow, site) or not _returns_a_loader(facts, target):
                continue
            if _converts_every_loader(facts, flow, site, target):
                continue
            if not _sampler_possible_within(facts, target, site, factories):
                continue
            yield site, target
            break


def _evaluation_call(flow, site: CallSite) -> bool:  # type: ignore[no-untyped-def]
    """`valid_loader = f(...)`, `f(valid_dataset)`, `f(split=cfg.TEST.SPLIT)`, or a call made
    in `val_dataloader()`; not `train_data_loader = f(...)`, even inside `run_eval_linear()`
    (the loader's own name says what it is for)."""
    target = flow.target_of(site.node)
    if target is not None and "train" in target.lower():
        return False
    texts = [target, site.ctx.function.name if site.ctx.function else None]
    values = site.node.args[:1] + [
        kw.value for kw in site.node.keywords if kw.arg and kw.arg.startswith(_DATA_KEYWORDS)
    ]
    for value in values:
        for node in ast.walk(value):
            if isinstance(node, (ast.Name, ast.Attribute)):
                texts += (names.dotted(node) or "").split(".")
    return looks_like_eval(*texts)


def _converts_every_loader(facts: ScriptFacts, flow, site: CallSite, factory: Function) -> bool:  # type: ignore[no-untyped-def]
    """`self.learner.dls.train = self._wrap_dl(self.dls.train)`, then the same for
    `.dls.valid` (PatchTST's DDP callback, after Ray Train's prepare_data_loader): one
    converter, each loader rebuilt in place, applied to the training loader and the evaluation loader alike, both kept on an
    object for a framework's shared loop (`for batch in self.dl`). As with a helper's loader,
    the loops decide: judged only where a loop of the program iterates under an evaluation
    name."""
    stored = flow.target_of(site.node)
    if stored is None or "." not in stored or not _rewraps(site, stored):
        return False
    graph = facts.project.graph
    twins = [
        other
        for other in facts.calls
        if other is not site
        and other.ctx.function is site.ctx.function
        and "train" in (flow.target_of(other.node) or "").lower()
        and factory in graph.targets(facts, other)
    ]
    return bool(twins) and not any(
        loop.iterates and looks_like_eval(*loop.iterates.split("."))
        for mate in program_files(facts)
        for loop in mate.loops
    )


def _rewraps(site: CallSite, stored: str) -> bool:
    """`dls.valid = wrap(self.dls.valid)`: the loader handed in is the one it replaces (a
    factory given a dataset, `self.test_loader = self._prepare_dataloader(test_dataset)`,
    as minGPT-ddp's trainer, is no converter)."""
    given = site.node.args[0] if site.node.args else None
    return given is not None and names.last_identifier(given) == stored.rsplit(".", 1)[-1]


def _returns_a_loader(facts: ScriptFacts, target: Function) -> bool:
    owner = facts.project.owner(target)
    values = facts.project.values
    for value in owner.returns.get(target.qualname, ()):
        ctx = owner.return_contexts.get(id(value))
        if ctx is None:
            continue
        held = [value, *_collected(owner, target, value)]
        for origin in (o for part in held for o in values.origins(owner, part, ctx)):
            if origin.kind == CALL and (
                origin.qualname in _LOADERS or "loader" in (origin.qualname or "").lower()
            ):
                return True
            if origin.kind == INSTANCE and origin.cls and is_padding_sampler_class(origin.cls):
                return True  # make_data_sampler(): the tree's own padding sampler
            if origin.kind == CALL and origin.call is not None:
                called = names.last_identifier(origin.call.func) or ""
                if "loader" in called.lower() or called == "klass":
                    return True
    return False


def _collected(owner: ScriptFacts, factory: Function, value: ast.expr) -> list[ast.expr]:
    """What the factory appends to the list it returns: `data_loaders.append(data_loader)`,
    then `return data_loaders` or `return data_loaders[0]` (maskrcnn-benchmark's
    make_data_loader, one loader per test set)."""
    if isinstance(value, ast.Subscript):
        value = value.value
    if not isinstance(value, ast.Name):
        return []
    return [
        call.node.args[0]
        for call in owner.methods_called("append")
        if call.ctx.function is factory
        and isinstance(call.receiver, ast.Name)
        and call.receiver.id == value.id
        and len(call.node.args) == 1
    ]


# The factory that calls this one (its file, itself) and the call made of it.
Outer = tuple[ScriptFacts, Function, CallSite] | None


def _sampler_possible_within(
    facts: ScriptFacts, factory: Function, call: CallSite, factories: dict[Function, int]
) -> bool:
    """`_sampler_possible` for a factory that builds the sampler itself, or one call down
    (`make_data_loader(is_distributed=False)` -> `make_data_sampler(ds, shuffle,
    is_distributed)` -> `if distributed: DistributedSampler(...)`); deeper ones may."""
    if factories[factory] == 0:
        return _sampler_possible(facts, factory, call)
    if factories[factory] > 1:
        return True
    owner = facts.project.owner(factory)
    graph = facts.project.graph
    inner = [
        (target, site)
        for site in owner.calls
        if site.ctx.function is factory
        for target in graph.targets(owner, site)
        if factories.get(target) == 0
    ]
    return not inner or any(
        _sampler_possible(owner, target, site, (owner, factory, call)) for target, site in inner
    )


def _sampler_possible(
    facts: ScriptFacts, factory: Function, call: CallSite, outer: Outer = None
) -> bool:
    """Whether some padding sampler of the factory is built on a path this call can take."""
    owner = facts.project.owner(factory)
    sites = [
        s for s in owner.calls if s.ctx.function is factory and builds_padding_sampler(owner, s)
    ]
    return any(_arm_possible(s, factory, call, outer) for s in sites) if sites else True


def _arm_possible(sampler: CallSite, factory: Function, call: CallSite, outer: Outer) -> bool:
    for branch in sampler.ctx.branches:
        test = getattr(branch.node, "test", None)
        outcome = _evaluate(test, factory, call, outer) if test is not None else None
        if outcome is not None and outcome != branch.arm:
            return False
    return True


def _either(test: ast.BoolOp, parts: list[bool | None]) -> bool | None:
    """`distributed and is_train` with is_train=False is False whatever `distributed` is;
    `a or b` with one part True is True; otherwise known only when every part is."""
    decisive = not isinstance(test.op, ast.And)
    if decisive in parts:
        return decisive
    return None if None in parts else not decisive


def _evaluate(test: ast.expr, factory: Function, call: CallSite, outer: Outer) -> bool | None:
    """The test's value for this call, when it only reads parameters the call sets to
    constants (or leaves at constant defaults), also through the parameters of the factory
    that makes the call (`outer`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _evaluate(test.operand, factory, call, outer)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        return _either(test, [_evaluate(v, factory, call, outer) for v in test.values])
    if isinstance(test, ast.Name):
        value = _passed(test.id, factory, call, outer)
        return None if value is _UNKNOWN else bool(value)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name):
        left = _passed(test.left.id, factory, call, outer)
        right = _constant(test.comparators[0])
        if left is _UNKNOWN or right is _UNKNOWN:
            return None
        op = test.ops[0]
        if isinstance(op, (ast.Eq, ast.Is)):
            return left == right
        if isinstance(op, (ast.NotEq, ast.IsNot)):
            return left != right
    return None


_UNKNOWN = object()


def _passed(name: str, factory: Function, call: CallSite, outer: Outer = None) -> object:
    if name not in factory.params:
        return _UNKNOWN
    for keyword in call.node.keywords:
        if keyword.arg == name:
            return _value(keyword.value, outer)
    index = factory.params.index(name) - (1 if factory.class_name else 0)
    args = call.node.args
    if 0 <= index < len(args) and not any(isinstance(a, ast.Starred) for a in args[: index + 1]):
        return _value(args[index], outer)
    arguments = factory.node.args
    positional = arguments.posonlyargs + arguments.args
    offset = len(positional) - len(arguments.defaults)
    for position, argument in enumerate(positional):
        if argument.arg == name and position >= offset:
            return _constant(arguments.defaults[position - offset])
    for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=False):
        if argument.arg == name and default is not None:
            return _constant(default)
    return _UNKNOWN


def _value(node: ast.expr, outer: Outer) -> object:
    """A constant, or a parameter of the calling factory never rebound in it: its value there."""
    if outer is None or not isinstance(node, ast.Name):
        return _constant(node)
    owner, factory, outer_call = outer
    stores = owner.assignments_by_target.get(node.id, ())
    if any(a.ctx.function is factory for a in stores):
        return _UNKNOWN
    return _passed(node.id, factory, outer_call)


def _constant(node: ast.expr) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant(node.operand)
        return -inner if isinstance(inner, (int, float)) else _UNKNOWN
    return _UNKNOWN


def per_dataset_factory_calls(facts: ScriptFacts) -> Iterator[tuple[CallSite, Function]]:
    """`create_sampler(datasets, [True, False], ...)` (BLIP, ALBEF): a factory of the tree
    that builds one padding DistributedSampler per dataset in a loop over `zip(datasets,
    shuffles)`, called with a flag list holding False: the unshuffled ones are the
    evaluation samplers. A program that drops the duplicates from its gathered results
    (`save_result(..., remove_duplicate="image_id")`) is left alone."""
    if _removes_duplicates(facts):
        return
    graph = facts.project.graph
    for site in facts.calls:
        for target in graph.targets(facts, site):
            flag = _per_dataset_flag(facts.project.owner(target), target)
            if flag is not None and _passes_a_false_flag(facts, site, target, flag):
                yield site, target
                break


def _per_dataset_flag(owner: ScriptFacts, factory: Function) -> str | None:
    """The factory's parameter that the padding sampler's `shuffle` comes from, element by
    element (`for dataset, shuffle in zip(datasets, shuffles)`), if there is one."""
    for sampler in owner.calls_by_key.get("DistributedSampler", ()):
        if sampler.ctx.function is not factory or not builds_padding_sampler(owner, sampler):
            continue
        shuffle = sampler.argument(3, "shuffle")
        if not isinstance(shuffle, ast.Name):
            continue
        for loop in sampler.ctx.loops:
            parameter = _zipped_parameter(loop.node, shuffle.id, factory)
            if parameter is not None:
                return parameter
    return None


def _zipped_parameter(loop: ast.AST, name: str, factory: Function) -> str | None:
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Tuple):
        return None
    source = loop.iter
    if not (isinstance(source, ast.Call) and names.last_identifier(source.func) == "zip"):
        return None
    for element, zipped in zip(loop.target.elts, source.args, strict=False):
        if isinstance(element, ast.Name) and element.id == name and isinstance(zipped, ast.Name):
            return zipped.id if zipped.id in factory.params else None
    return None


def _passes_a_false_flag(
    facts: ScriptFacts, site: CallSite, factory: Function, parameter: str
) -> bool:
    """The flags passed hold False: a list or tuple written at the call, or in the one
    assignment of a local name (`shuffles = [True, False]`)."""
    index = factory.params.index(parameter) - (1 if factory.class_name else 0)
    value = site.argument(index, parameter)
    if isinstance(value, ast.Name):
        stores = [
            a
            for a in facts.assignments_by_target.get(value.id, ())
            if a.ctx.function is site.ctx.function and not a.index
        ]
        value = stores[0].value if len(stores) == 1 else value
    return isinstance(value, (ast.List, ast.Tuple)) and any(
        isinstance(e, ast.Constant) and e.value is False for e in value.elts
    )


def _removes_duplicates(facts: ScriptFacts) -> bool:
    return any(
        keyword.arg is not None
        and ("duplicate" in keyword.arg or "dedup" in keyword.arg)
        and not (isinstance(keyword.value, ast.Constant) and not keyword.value.value)
        for site in facts.calls
        for keyword in site.node.keywords
    )


def eval_loaders_from_factories(facts: ScriptFacts) -> Iterator[Hit]:
    for site, factory in [*evaluation_factory_calls(facts), *per_dataset_factory_calls(facts)]:
        yield hit(
            facts,
            site.node,
            f"{text_of(site.node)} splits evaluation data with {factory.name}(), which pads "
            "it with a DistributedSampler: metrics count some samples twice",
            {"factory": factory.qualname},
            cause="evaluation sampler",
        )
