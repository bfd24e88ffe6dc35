"""Resumes through a helper the checked tree does not hold (DDP117): the DDP wrapper handed
to `utils.restart_from_checkpoint(path, student=student)` or `load_checkpoint(r_path,
encoder=encoder)` whose module is out of view. Its name says it restores a checkpoint, and
what it restores into is the wrapper: the program reads the "module." keys back."""

from __future__ import annotations

import re

from ddp_doctor.script.evidence import program_files
from ddp_doctor.script.facts import CallSite, ScriptFacts
from ddp_doctor.script.flow import flow_of
from ddp_doctor.script.purpose import reads_prefixed_keys_back

# restart_from_checkpoint, load_checkpoint, resume_ckpt, restore_state, load_weights
_RESTORING_NAME = re.compile(
    r"(load|restore|resume|restart).*(checkpoint|ckpt|ckp|state|weights)", re.IGNORECASE
)


def expects_prefixed_keys(facts: ScriptFacts) -> bool:
    """Whether the program restores into the DDP wrapper, through code in view
    (purpose.reads_prefixed_keys_back) or through a restoring helper out of view."""
    return reads_prefixed_keys_back(facts) or any(
        _restores_wrapper_out_of_view(mate, site)
        for mate in program_files(facts)
        for site in mate.calls
        if _RESTORING_NAME.search(site.key or "")
    )


def _restores_wrapper_out_of_view(facts: ScriptFacts, site: CallSite) -> bool:
    """A call of a restoring helper the tree cannot follow, given the wrapper itself."""
    flow = flow_of(facts)
    if site.key == "load_state_dict" or flow.graph.targets(facts, site):
        return False  # a direct restore, or a helper in view: purpose.py judges those
    passed = [*site.node.args, *(k.value for k in site.node.keywords if k.arg)]
    return any(flow.holds_wrapped_model(a, site.ctx, site.node) for a in passed)
