"""The saves DDP116 leaves alone: each process writes a file of its own, rank 0 writes first
and the others find it, or the caller out of view chooses the ranks."""

from __future__ import annotations

from ddp_doctor.script.evidence import called_from_out_of_view
from ddp_doctor.script.facts import CallSite, ScriptFacts
from ddp_doctor.script.firstrank import prepared_by_rank_zero_first
from ddp_doctor.script.purpose import in_memory
from ddp_doctor.script.rankflow import mentions_rank, saves_a_sample_cache


def save_left_alone(facts: ScriptFacts, save: CallSite) -> bool:
    """A save to a path with the rank in it or into memory, a cache rank 0 makes first
    (the others then read it), a dataset's file per sample, or a save in a helper module's
    function that nothing in view calls (wenet's checkpoint.save_checkpoint: its caller,
    out of view, saves under `if rank == 0:`)."""
    path = save.argument(1, "f")
    if (path is not None and mentions_rank(facts, path)) or in_memory(facts, save):
        return True
    if prepared_by_rank_zero_first(facts, save.ctx, save.node.lineno):
        return True
    if saves_a_sample_cache(facts, save):
        return True
    return called_from_out_of_view(facts, save.ctx.function)
