"""Seeding helpers whose definition is out of view, judged by DDP122 at their calls.

PixArt-alpha's trainers call `set_random_seed(config.seed)` from their own `diffusion.utils.misc`,
a module the checked folder does not hold: the helper mechanism of seeding.py (a function of the
tree that seeds with its own parameter) cannot see its body. A call is taken for such a helper
when its name says it seeds (`set_seed`, `set_random_seed`, `setup_seed`, `seed_everything`,
`fix_seed`), its target is in no module of the checked tree and is no library's (torch,
transformers, accelerate, ...), and it stands as a statement of its own: its result is dropped, so it runs for what it
does to the generators (`seed = init_random_seed(...)` returns a seed and seeds nothing).
"""

from __future__ import annotations

import ast

from ddp_doctor.script import names
from ddp_doctor.script.facts import CallSite, ScriptFacts

_SEED_WORDS = frozenset({"seed", "seeds", "everything"})
_SEEDING_VERBS = frozenset({"set", "setup", "fix", "seed"})
# init_*: ambiguous (mmdet's init_random_seed returns a seed, fairscale's benchmark one seeds).
# Libraries' own functions are no helpers of the project (transformers.trainer_utils.set_seed).
_LIBRARIES = frozenset(
    {
        "transformers",
        "accelerate",
        "lightning",
        "pytorch_lightning",
        "mmcv",
        "mmengine",
        "mmdet",
        "detectron2",
        "timm",
        "deepspeed",
        "numpy",
        "torch",
    }
)
_NOT_SEEDING = frozenset({"worker", "get", "generator", "rng"})


def seeding_name(name: str) -> bool:
    """set_seed, set_random_seed, setup_seed, seed_everything, seed_all, fix_seed; not
    seed_worker (a DataLoader worker's init), get_seed, init_random_seed."""
    words = name.lower().strip("_").split("_")
    return (
        words[0] in _SEEDING_VERBS
        and bool(set(words) & _SEED_WORDS)
        and not set(words) & _NOT_SEEDING
        and words != ["seed"]
    )


def _statement_calls(facts: ScriptFacts) -> frozenset[int]:
    """ids of the calls of the file that stand as statements (computed once)."""
    cached = facts.__dict__.get("_statement_calls")
    if cached is None:
        tree = facts.tree
        found = (
            {
                id(node.value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            }
            if tree is not None
            else set()
        )
        cached = facts.__dict__["_statement_calls"] = frozenset(found)
    return cached


def unseen_seeding_calls(facts: ScriptFacts) -> list[CallSite]:
    """The file's calls of seeding helpers defined out of view (see the module's text)."""
    statements = _statement_calls(facts)
    found = []
    for site in facts.calls:
        if not seeding_name(site.key) or id(site.node) not in statements:
            continue
        if not (site.node.args or site.node.keywords):
            continue
        qualified = facts.resolve(site) or ""
        if qualified in names.SEEDERS or qualified.partition(".")[0] in _LIBRARIES:
            continue  # judged as the seeders they are, or a library's own function
        if site.receiver is not None and qualified == "":
            continue  # `self.set_seed(s)`, `rng.seed(s)`: a method of an object out of view
        if facts.project.graph.targets(facts, site):
            continue  # a function of the tree: seeding.py judges it by its body
        found.append(site)
    return found
