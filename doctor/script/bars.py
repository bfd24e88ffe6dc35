"""What kind of progress bar a call is, and whether a log call names the rank (DDP119)."""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import CallSite
from ddp_doctor.script.guards import is_rank_like

# tqdm's bars: tqdm.tqdm, tqdm.auto.tqdm, and trange(...), tqdm(range(...)) by another name
_BARS = frozenset({"tqdm", "trange"})


def is_progress_bar(qualified: str) -> bool:
    if qualified == "tqdm" or qualified.endswith(".tqdm"):
        return True
    return qualified.split(".", 1)[0] == "tqdm" and qualified.rsplit(".", 1)[-1] in _BARS


# Keywords that shape a bar but do not make one per rank: `leave=(rank == 0)` only keeps rank
# 0's bar on screen after the loop (OpenPCDet's train_utils.py); every rank draws one meanwhile
BAR_LOOKS = frozenset({"leave", "dynamic_ncols", "ncols", "bar_format", "unit", "colour"})


def names_the_rank(call: CallSite) -> bool:
    """The rank in the message, a bar's desc= or position=: one line or bar per rank, meant.
    A rank in a keyword that only shapes the bar (`leave=(rank == 0)`) is no such choice."""
    given = [
        *call.node.args,
        *(kw.value for kw in call.node.keywords if kw.arg not in BAR_LOOKS),
    ]
    return any(is_rank_like(node) for value in given for node in ast.walk(value))


def displays_once(call: CallSite) -> bool:
    """`tqdm(None, desc=..., total=n, initial=n)`: a line of results, a print."""
    iterable = call.argument(0, "iterable")
    return isinstance(iterable, ast.Constant) and iterable.value is None
