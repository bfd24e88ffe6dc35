"""print silenced off rank 0 by a helper module out of view, known by its family.

torchvision's references/*/utils.py, copied as util/misc.py by DETR, DeiT, MAE, DINO and
their descendants, keeps MetricLogger, SmoothedValue and init_distributed_mode together; the
last ends with `setup_for_distributed(args.rank == 0)`, which replaces builtins.print with
one that is silent off rank 0 unless forced. When that module is not in the tree (a set or a
user checks the entry points only), a program that calls its init_distributed_mode and also
uses its MetricLogger or SmoothedValue has its print silenced off rank 0. A helper known only
by init_distributed_mode is not enough: many of that name do not touch print.
"""

from __future__ import annotations

from ddp_doctor.script.facts import ScriptFacts

_INIT = "init_distributed_mode"
_FAMILY = frozenset({"MetricLogger", "SmoothedValue"})


def references_family_silences_print(files: list[ScriptFacts]) -> bool:
    """The program calls init_distributed_mode of a module out of view that also gives it
    MetricLogger or SmoothedValue (the torchvision references utils.py family)."""
    inits = {module for f in files for module in _modules_out_of_view(f, (_INIT,))}
    return bool(inits) and any(
        module in inits for f in files for module in _modules_out_of_view(f, _FAMILY)
    )


def _modules_out_of_view(facts: ScriptFacts, keys: tuple[str, ...] | frozenset[str]) -> set[str]:
    """The dotted modules whose `keys` the file calls, where the tree does not define them."""
    found = set()
    for key in keys:
        for site in facts.calls_by_key.get(key, ()):
            qualified = facts.qualname(site.node.func) or ""
            module, _, name = qualified.rpartition(".")
            if not module or name != key:
                continue
            if facts.project.definition(facts, site.node.func, site.ctx) is not None:
                continue  # in view: judged by what it does
            found.add(module)
    return found
