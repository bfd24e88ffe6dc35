"""Process groups started by a set-up helper the checked tree does not hold (DDP121): the
DeiT/DINO family's `utils.init_distributed_mode(args)`, mmdet-style `init_dist(...)`, from a
utils.py out of view. The name says the helper starts the group; whether anything ends it is
read from the program in view: no destroy_process_group, no cleanup-like call anywhere."""

from __future__ import annotations

import os
import re

from ddp_doctor.script import names
from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, ScriptFacts

# init_distributed_mode, init_distributed, init_dist, setup_distributed, dist_init, setup_ddp
_STARTS_GROUP = re.compile(
    r"(init|initialize|setup)_?(dist|distributed|ddp)(_mode|_env|_training)?$|dist_init$"
)
# destroy_process_group, cleanup, cleanup_distributed, teardown, shutdown, finalize_dist
_ENDS_GROUP = re.compile(r"destroy|clean_?up|tear_?down|shutdown|finali[sz]e", re.IGNORECASE)
# Libraries whose set-up helpers are their own business (they document how the group ends).
LIBRARIES = (
    "accelerate.",
    "apex.",
    "colossalai.",
    "deepspeed.",
    "detectron2.",
    "fairseq.",
    "horovod.",
    "ignite.",
    "lightning.",
    "megatron.",
    "mmcv.",
    "mmengine.",
    "pytorch_lightning.",
    "submitit.",
    "timm.",
    "torch.",
    "transformers.",
)


def unseen_group_starts(facts: ScriptFacts) -> list[CallSite]:
    """Calls of an out-of-view set-up helper that starts the group, in a program that calls
    init_process_group nowhere in view (else the rule judges that init) and ends nothing."""
    starts = [site for site in facts.calls if _starts_group_out_of_view(facts, site)]
    if not starts:
        return []
    for mate in program_files(facts):
        if mate.calls_to(names.INIT_PROCESS_GROUP) or any(
            _ENDS_GROUP.search(site.key or "") for site in mate.calls
        ):
            return []
    return starts


def _starts_group_out_of_view(facts: ScriptFacts, site: CallSite) -> bool:
    if not _STARTS_GROUP.match(site.key or "") or facts.project.graph.targets(facts, site):
        return False
    qualified = facts.resolve(site)
    # imported from a module (`utils.init_distributed_mode`), not a local name nor a library
    if qualified is None or "." not in qualified or qualified.startswith(LIBRARIES):
        return False
    return not defined_in_tree(facts, qualified)


def defined_in_tree(facts: ScriptFacts, qualified: str) -> bool:
    """The helper is in view under a search path the imports cannot follow: CvT's
    `import _init_paths` (it puts lib/ on sys.path) then `from utils.utils import
    init_distributed`, defined in lib/utils/utils.py of the tree. The tree's own def is
    judged where it sits (its init_process_group, or none: then it starts nothing)."""
    module, _, name = qualified.rpartition(".")
    tail = os.sep + os.path.join(*module.split("."))
    tails = (tail, tail + os.sep + "__init__")
    for path, mate in facts.project.files.items():
        if os.path.splitext(path)[0].endswith(tails) and any(
            f.name == name and f.class_name is None for f in mate.functions
        ):
            return True
    return False
