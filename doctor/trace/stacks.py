"""faulthandler's dump of a rank's threads, read back: the main thread's frames, the user's own
frame among them, and whether the rank is waiting inside torch.distributed.

faulthandler writes (CPython 3.9 to 3.13):
    Current thread 0x00007f9ce2a20b80 (most recent call first):
      File "/path/train.py", line 15 in main
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from ddp_doctor.facts.trace import Site
from ddp_doctor.patient.trace.sites import is_user_file

THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
# Where a rank blocked in a collective sits: torch.distributed's calls and DDP's own syncs.
COLLECTIVE_CODE = ("/torch/distributed/", "/torch/nn/parallel/distributed.py")
BACKWARD_CODE = ("/torch/autograd/", "/torch/_tensor.py")  # DDP's all-reduce waits in backward


def threads(text: str) -> dict[int, tuple[Site, ...]]:
    """Thread id -> frames, innermost first; the last dump wins where there are several."""
    found: dict[int, list[Site]] = {}
    current: list[Site] | None = None
    for line in text.splitlines():
        header = THREAD.match(line)
        if header:
            current = found[int(header.group(1), 16)] = []
            continue
        frame = FRAME.match(line)
        if frame and current is not None:
            current.append(Site(frame.group(1), int(frame.group(2)), frame.group(3).strip()))
    return {ident: tuple(frames) for ident, frames in found.items()}


def main_frames(text: str, main_thread: int | None) -> tuple[Site, ...]:
    dumped = threads(text)
    if main_thread in dumped:
        return dumped[main_thread]
    return next(iter(dumped.values()), ())  # an older dump format: the first thread listed


def user_site(frames: Iterable[Site], not_user: Mapping[str, Sequence[str]]) -> Site | None:
    folders = {key: list(value) for key, value in not_user.items()}
    return next((f for f in frames if is_user_file(f.path, folders)), None)


def waiting_in(frames: Sequence[Site], not_user: Mapping[str, Sequence[str]]) -> str | None:
    """'collective' when the innermost library frames are torch.distributed's, 'backward' when
    they are autograd's (where DDP waits for its all-reduce), else None."""
    folders = {key: list(value) for key, value in not_user.items()}
    for frame in frames:
        if is_user_file(frame.path, folders):
            return None
        path = frame.path.replace("\\", "/")
        if any(part in path for part in COLLECTIVE_CODE):
            return "collective"
        if any(part in path for part in BACKWARD_CODE):
            return "backward"
    return None
