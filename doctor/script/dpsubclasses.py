"""DataParallel under the project's own name (DDP101): `class MyDataParallel(nn.DataParallel)`
in the project's utils.py, then `model = MyDataParallel(model)` in the entry point (ABINet's
main.py). Such subclasses usually override `gather` or `__getattr__` only; they run the same
one-process scatter and gather.

A call counts when the class is defined in the checked tree with a DataParallel base, or,
when its module is the project's own and not in view, when its name ends in "DataParallel"
and says neither Distributed nor Shard (`MyDataParallel`, `BalancedDataParallel`; not FullyShardedDataParallel). Library classes
(mmcv's MMDataParallel, torch_geometric's DataParallel) are their own business and stay
silent.
"""

from __future__ import annotations

import re

from ddp_doctor.script.facts import CallSite, ScriptFacts
from ddp_doctor.script.unseeninits import LIBRARIES, defined_in_tree

_NAME = re.compile(r"DataParallel$")
_SHARDED = re.compile(r"Distributed|Shard")  # DDP, FSDP, fairscale's ShardedDataParallel


def data_parallel_subclass_calls(facts: ScriptFacts) -> list[CallSite]:
    return [site for site in facts.calls if _is_subclass_call(facts, site)]


def _is_subclass_call(facts: ScriptFacts, site: CallSite) -> bool:
    key = site.key or ""
    if not _NAME.search(key) or _SHARDED.search(key) or key == "DataParallel":
        return False
    qualified = facts.resolve(site) or key
    if qualified.startswith(LIBRARIES):
        return False
    name = qualified.rpartition(".")[2]
    classes = [
        info
        for mate in facts.project.files.values()
        for info in [mate.classes.get(name)]
        if info is not None
    ]
    if classes:
        return any(_data_parallel_base(base) for info in classes for base in info.bases)
    return "." in qualified and not defined_in_tree(facts, qualified)


def _data_parallel_base(base: str) -> bool:
    return base.rpartition(".")[2] == "DataParallel"
