"""Data flow from DistributedSampler to DataLoader to set_epoch and to the epoch loop.

`sampler = DistributedSampler(ds)`; `loader = DataLoader(ds, sampler=sampler)`;
`loader.sampler.set_epoch(epoch)` or `self.train_data.sampler.set_epoch(epoch)` in a method
the epoch loop calls. Where the sampler and loader go is asked of the tree's data flow
(values.py): kept on `self`, returned by a helper, handed to a trainer's constructor.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property

from ddp_doctor.script import names
from ddp_doctor.script.evidence import shares_a_program
from ddp_doctor.script.facts import CallSite, ClassInfo, Context, Loop, ScriptFacts
from ddp_doctor.script.flow import candidates, flow_of
from ddp_doctor.script.origins import CALL, Origin
from ddp_doctor.script.retryloops import in_repeating_loop
from ddp_doctor.script.values import Values

_EVAL_WORDS = frozenset(
    {"val", "valid", "validation", "test", "testing", "eval", "evaluation", "dev"}
)
_WORD = re.compile(r"[A-Za-z][a-z]*|[0-9]+")


_EVAL_PREFIXES = ("val", "valid", "test", "eval")


def looks_like_eval(*texts: str | None) -> bool:
    """`val_sampler`, `self.test_loader`, `evalLoader`, `valdataset`: named for evaluation."""
    for text in texts:
        if not text:
            continue
        last = text.rsplit(".", 1)[-1]
        if any(w.lower() in _EVAL_WORDS for w in _WORD.findall(last)):
            return True
        squashed = last.lower().lstrip("_")
        if squashed.startswith(_EVAL_PREFIXES) and not squashed.startswith("value"):
            return True
    return False


@dataclass
class SamplerUse:
    """One DistributedSampler construction and where it goes."""

    site: CallSite
    names: set[str] = field(default_factory=set)  # what holds the sampler
    loaders: list[CallSite] = field(default_factory=list)
    loader_names: set[str] = field(default_factory=set)  # what holds the loader, here
    returned_to: set[str] = field(default_factory=set)  # ... in callers of a loader factory

    @property
    def shuffles(self) -> bool:
        shuffle = self.site.argument(3, "shuffle")
        return not (isinstance(shuffle, ast.Constant) and not shuffle.value)

    @property
    def drops_last(self) -> bool:
        drop = self.site.keyword("drop_last")
        return isinstance(drop, ast.Constant) and drop.value is True

    @property
    def seeded_per_epoch(self) -> bool:
        """Built inside a loop with a seed from the loop's variable (`for epoch in ...:
        DistributedSampler(ds, seed=args.seed + epoch)`): a new order every epoch, as
        set_epoch would give."""
        seed = self.site.argument(4, "seed")
        if seed is None:
            return False
        used = {n.id for n in ast.walk(seed) if isinstance(n, ast.Name)}
        return any(loop.target in used for loop in self.site.ctx.loops if loop.target)

    def is_for_eval(self) -> bool:
        dataset = self.site.argument(0, "dataset")
        return looks_like_eval(
            *self.names, *self.loader_names, names.dotted(dataset) if dataset is not None else None
        )

    def receivers(self) -> set[str]:
        """Texts that reach this sampler: `sampler`, `loader.sampler`, `loader.batch_sampler.sampler`."""
        found = set(self.names)
        for loader in self.loader_names | self.returned_to:
            found |= {
                f"{loader}.sampler",
                f"{loader}.batch_sampler.sampler",
                f"{loader}.batch_sampler",
            }
        return found


class SamplerFlow:
    def __init__(self, facts: ScriptFacts) -> None:
        self.facts = facts
        self.flow = flow_of(facts)
        self.values: Values = facts.project.values

    @cached_property
    def loaders(self) -> list[CallSite]:
        return self.facts.calls_to(names.DATA_LOADER)

    @cached_property
    def uses(self) -> list[SamplerUse]:
        return self._uses_of(self.facts.calls_to(names.DISTRIBUTED_SAMPLER))

    @cached_property
    def padding_uses(self) -> list[SamplerUse]:
        """The torch DistributedSampler's uses and those of the tree's own samplers of its
        family (DDP114): a class named ...DistributedSampler defined in the tree, or one that
        subclasses torch's (Deformable-DETR's samplers.DistributedSampler, a copy that pads)."""
        own = [site for site in self.facts.calls if self._is_own_distributed_sampler(site)]
        return [*self.uses, *self._uses_of(own)] if own else self.uses

    def _is_own_distributed_sampler(self, site: CallSite) -> bool:
        return is_own_padding_sampler(self.facts, site)

    def _uses_of(self, sites: list[CallSite]) -> list[SamplerUse]:
        found = []
        for site in sites:
            use = SamplerUse(site)
            target = self.flow.target_of(site.node)
            if target:
                use.names.add(target)
            for loader in self.loaders:
                if self._feeds(use, loader):
                    use.loaders.append(loader)
                    target = self.flow.target_of(loader.node)
                    use.loader_names |= {target} if target else set()
                    use.returned_to |= self._names_of_loader(loader) - use.loader_names
            found.append(use)
        return found

    def _feeds(self, use: SamplerUse, loader: CallSite) -> bool:
        own = Origin(CALL, use.site.node, self.facts)
        for keyword in ("sampler", "batch_sampler"):
            value = loader.argument(2, keyword) if keyword == "sampler" else loader.keyword(keyword)
            if value is None:
                continue
            for candidate in candidates(value):
                if candidate is use.site.node or names.dotted(candidate) in use.names:
                    return True
                if isinstance(candidate, ast.Call) and any(
                    a is use.site.node or names.dotted(a) in use.names for a in candidate.args
                ):
                    return True  # BatchSampler(sampler, ...)
            if own in self._sources(value, loader.ctx):
                return True
        return False

    def _sources(self, value: ast.expr, ctx: Context) -> set[Origin]:
        """What a sampler argument holds, through BatchSampler(sampler, ...) too."""
        found = set(self.values.origins(self.facts, value, ctx))
        for origin in list(found):
            call = origin.call
            wraps = (origin.qualname or origin.name or "").endswith("BatchSampler")
            if call is not None and wraps and call.args:  # BatchSampler(sampler, ...)
                site = origin.facts.site_of.get(id(call)) if origin.facts else None
                if site is not None:
                    found |= self.values.origins(origin.facts, call.args[0], site.ctx)  # type: ignore[arg-type]
        return found

    def _names_of_loader(self, loader: CallSite) -> set[str]:
        found = set()
        target = self.flow.target_of(loader.node)
        if target:
            found.add(target)
        if loader.ctx.function is not None and self._returned(loader, target):
            for caller in self.flow.local_call_sites(loader.ctx.function):
                caller_target = flow_of(self.facts).target_of(caller.node)
                if caller_target:
                    found.add(caller_target)
        return found

    def _returned(self, loader: CallSite, target: str | None) -> bool:
        function = loader.ctx.function
        assert function is not None
        for value in self.facts.returns.get(function.qualname, ()):
            parts = value.elts if isinstance(value, ast.Tuple) else [value]
            for part in parts:
                if part is loader.node or (target and names.dotted(part) == target):
                    return True
        return False

    # set_epoch -------------------------------------------------------------------------------

    @cached_property
    def set_epoch_calls(self) -> list[tuple[ScriptFacts, CallSite]]:
        """set_epoch calls of this file's programs (a trainer module it imports may call it;
        an unrelated script beside it may not)."""
        return [
            (facts, call)
            for facts in self.flow.graph.files()
            if shares_a_program(self.facts, facts)
            for call in facts.methods_called("set_epoch")
        ]

    def set_epoch_for(self, use: SamplerUse) -> list[CallSite]:
        """set_epoch calls that reach this sampler, or reach a sampler we cannot name."""
        own = Origin(CALL, use.site.node, self.facts)
        samplers = {Origin(CALL, u.site.node, self.facts) for u in self.uses}
        receivers = use.receivers()
        known = set().union(*(u.receivers() for u in self.uses)) if self.uses else set()
        found = []
        for facts, call in self.set_epoch_calls:
            held = self.values.origins(facts, call.receiver, call.ctx)  # type: ignore[arg-type]
            if own in held:
                found.append(call)
                continue
            if held & samplers or any(_is_sampler(o) for o in held):
                continue  # another DistributedSampler the data flow can name
            if facts is not self.facts:
                found.append(call)  # a set_epoch elsewhere on something unknown: maybe ours
                continue
            text = names.dotted(call.receiver) if call.receiver is not None else None
            if text in receivers or text is None or text not in known:
                found.append(call)
        return found

    # loops -----------------------------------------------------------------------------------

    def iterations(self, use: SamplerUse) -> list[tuple[ScriptFacts, Loop]]:
        """Loops of the tree over a loader this sampler feeds (or over the sampler)."""
        wanted = {Origin(CALL, n.node, self.facts) for n in [use.site, *use.loaders]}
        return [(facts, loop) for facts, loop, held in _loops(self.facts) if held & wanted]

    def runs_epochs(self, use: SamplerUse) -> bool | None:
        """Whether the loader is iterated once per epoch of an outer loop (not a retry loop of
        one pass: retryloops.py); None when no loop over it is in view. False when nothing can iterate it: the sampler and its loaders
        are held in local names that nothing reads but the loader's construction (a training
        loader an evaluation script builds beside the one it runs)."""
        iterations = self.iterations(use)
        if not iterations:
            return False if self._never_used(use) else None
        graph = self.flow.graph
        return any(
            loop.ctx is not None and in_repeating_loop(graph, loop.ctx) for _, loop in iterations
        )

    def for_eval(self, use: SamplerUse) -> bool:
        """Named for evaluation (sampler, dataset or loader), or iterated only as an evaluation
        loader: `test_dataloader = utils.prepare_eval_samples(...)` and then `for batch in
        test_dataloader`, where the factory's own names say nothing."""
        if use.is_for_eval():
            return True
        iterated = [
            names.dotted(node) for _, loop in self.iterations(use) for node in _loop_names(loop)
        ]
        return bool(iterated) and all(looks_like_eval(text) for text in iterated)

    def _never_used(self, use: SamplerUse) -> bool:
        if not use.loaders or use.returned_to:
            return False
        for loader in use.loaders:
            target = self.flow.target_of(loader.node)
            if target is None or "." in target or self._reads(loader.ctx, target):
                return False
        return all(
            "." not in name and not self._reads(use.site.ctx, name, inside_samplers=True)
            for name in use.names
        )

    def _reads(self, ctx: Context, name: str, inside_samplers: bool = False) -> bool:
        """Whether the scope reads the name (with `inside_samplers`, other than as an argument
        of a DataLoader or BatchSampler call: the loader's own construction)."""
        scope = ctx.function.node if ctx.function is not None else self.facts.tree
        if scope is None:
            return True
        built_with = set()
        if inside_samplers:
            for node in ast.walk(scope):
                if isinstance(node, ast.Call) and _builds_loading(node):
                    arguments = [*node.args, *(k.value for k in node.keywords)]
                    built_with |= {id(a) for a in arguments}
        return any(
            isinstance(node, ast.Name)
            and node.id == name
            and isinstance(node.ctx, ast.Load)
            and id(node) not in built_with
            for node in ast.walk(scope)
        )

    @cached_property
    def has_manual_training_loop(self) -> bool:
        """A loop over a loader or a backward() call that can repeat (anywhere in the tree:
        in a loop or a function): the project drives the epochs itself. A backward() at the
        top of a module, in no loop, is one step (a notebook of snippets)."""
        if any(
            call.ctx.loops or not call.ctx.module_level
            for f in self.flow.graph.files()
            for call in f.methods_called("backward")
        ):
            return True
        loader_names = (
            set().union(*(u.loader_names | u.returned_to for u in self.uses))
            if self.uses
            else set()
        )
        return any(loop.iterates in loader_names for loop in self.facts.loops)


def is_own_padding_sampler(facts: ScriptFacts, site: CallSite) -> bool:
    """A construction of the tree's own sampler of DistributedSampler's family: a class named
    ...DistributedSampler defined in the tree, or subclassing torch's, whose __iter__ pads
    (or, for a subclass, is torch's)."""
    if not site.key.endswith("Sampler") or facts.resolve(site) == names.DISTRIBUTED_SAMPLER:
        return False
    cls = facts.project.definition(facts, site.node.func, site.ctx)
    return isinstance(cls, ClassInfo) and is_padding_sampler_class(cls)


def is_padding_sampler_class(cls: ClassInfo) -> bool:
    subclass = any(base.rsplit(".", 1)[-1] == "DistributedSampler" for base in cls.bases)
    if not (subclass or cls.name.endswith("DistributedSampler")):
        return False
    iterate = cls.methods.get("__iter__")
    return pads(iterate.node) if iterate is not None else subclass


def pads(iterate: ast.AST) -> bool:
    """A sampler's __iter__ that pads like torch's: `indices += indices[: (self.total_size -
    len(indices))]`, or any use of a total_size; one that only slices `indices[rank::world]`
    (a DistributedEvalSampler) does not."""
    for node in ast.walk(iterate):
        if isinstance(node, ast.Attribute) and node.attr == "total_size":
            return True
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, ast.Add)
            and isinstance(node.target, ast.Name)
            and any(
                isinstance(n, ast.Name) and n.id == node.target.id for n in ast.walk(node.value)
            )
        ):
            return True
    return False


def _is_sampler(origin: Origin) -> bool:
    return origin.kind == CALL and origin.qualname == names.DISTRIBUTED_SAMPLER


def _loops(facts: ScriptFacts) -> list[tuple[ScriptFacts, Loop, set[Origin]]]:
    """Every `for` loop of the tree with what its iterable may hold (`loader`,
    `enumerate(loader)`, `tqdm(self.loader)`), computed once per tree."""
    graph = facts.project.graph
    cached = graph.__dict__.get("_loops")
    if cached is not None:
        return cached
    values = facts.project.values
    found = []
    for owner in graph.files():
        for loop in owner.loops:
            iterable = getattr(loop.node, "iter", None)
            if iterable is None or loop.ctx is None:
                continue
            held: set[Origin] = set()
            for node in _iterated(iterable):
                held |= values.origins(owner, node, loop.ctx)
            if held:
                found.append((owner, loop, held))
    graph.__dict__["_loops"] = found
    return found


def _builds_loading(call: ast.Call) -> bool:
    last = names.last_identifier(call.func) or ""
    return last == "DataLoader" or last.endswith("BatchSampler")


def _loop_names(loop: Loop) -> list[ast.expr]:
    iterable = getattr(loop.node, "iter", None)
    return _iterated(iterable) if iterable is not None else []


_WRAPPING_ITERATORS = frozenset({"enumerate", "tqdm", "zip", "iter", "islice", "cycle", "chain"})


def _iterated(iterable: ast.expr) -> list[ast.expr]:
    """The names a loop iterates: `loader` in `enumerate(tqdm(loader))`; none in `range(n)`."""
    if isinstance(iterable, (ast.Name, ast.Attribute)):
        return [iterable]
    if isinstance(iterable, ast.IfExp):  # tqdm(loader) if is_master else loader
        return _iterated(iterable.body) + _iterated(iterable.orelse)
    if (
        isinstance(iterable, ast.Call)
        and names.last_identifier(iterable.func) in _WRAPPING_ITERATORS
    ):
        return [n for arg in iterable.args for n in _iterated(arg)]
    return []
