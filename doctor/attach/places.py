"""Where a rank is at one sample, read from its main thread's stack and /proc: in a collective
(and which), in DDP's gradient all-reduce (backward), in init, in data loading, or in its own
code; with the user's innermost frame. Pure functions over facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddp_doctor.facts.attach import RankSample, ThreadStack
from ddp_doctor.facts.trace import Site

COLLECTIVE, BACKWARD, INIT, DATA, OWN, KERNEL, UNKNOWN = (
    "collective",
    "backward",
    "init",
    "data",
    "own code",
    "kernel",
    "unknown",
)
WAITING_KINDS = (COLLECTIVE, BACKWARD)
C10D = "/torch/distributed/"
INIT_FUNCTIONS = ("init_process_group", "rendezvous", "_create_c10d_store", "_store_based_barrier")
DATA_CODE = "/torch/utils/data/"
BACKWARD_CODE = ("/torch/autograd/", "/torch/_tensor.py")
LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen")
# Wait channels of a process asleep in the kernel, as the reader of a report says them.
WCHAN_WORDS = {
    "futex": "a lock or condition (futex)",
    "pipe_read": "reading a pipe",
    "do_select": "waiting on sockets (select)",
    "do_poll": "waiting on sockets or files (poll)",
    "do_sys_poll": "waiting on sockets or files (poll)",
    "ep_poll": "waiting on sockets (epoll)",
    "hrtimer_nanosleep": "sleeping (time.sleep)",
    "do_nanosleep": "sleeping (time.sleep)",
    "sk_wait_data": "reading a socket",
    "wait_woken": "reading a socket",
    "do_wait": "waiting for a child process",
}


@dataclass(frozen=True)
class Place:
    kind: str  # one of the kinds above
    op: str | None = None  # the collective (all_reduce, barrier ...); DDP's is all_reduce
    site: Site | None = None  # the user's innermost frame
    detail: str = ""  # data loading, kernel wait, ...

    def describe(self) -> str:
        where = f" at {self.site}" if self.site else ""
        if self.kind == COLLECTIVE:
            return f"waits in {self.op}{where}"
        if self.kind == BACKWARD:
            return f"waits in DDP's gradient all_reduce (backward){where}"
        if self.kind == INIT:
            return f"waits in init_process_group{where}"
        if self.kind == DATA:
            return f"is in data loading{where}" + (f", {self.detail}" if self.detail else "")
        if self.kind == KERNEL:
            return f"is {self.detail}" if self.detail else "is in the kernel"
        if self.kind == OWN:
            return f"is in its own code{where}" + (f", {self.detail}" if self.detail else "")
        return f"cannot be seen ({self.detail})" if self.detail else "cannot be seen"


def main_thread(sample: RankSample) -> ThreadStack | None:
    named = [t for t in sample.threads if t.name == "MainThread"]
    return named[0] if named else (sample.threads[0] if sample.threads else None)


def is_user_frame(site: Site) -> bool:
    path = site.path.replace("\\", "/")
    if path.startswith("<") or not path:
        return False
    return not any(marker in path for marker in LIBRARY_MARKERS)


def user_site(frames: Sequence[Site]) -> Site | None:
    return next((f for f in frames if is_user_frame(f)), None)


def place_of(sample: RankSample) -> Place:
    thread = main_thread(sample)
    if thread is None or not thread.frames:
        return _from_proc(sample)
    frames = thread.frames
    site = user_site(frames)
    library = _library_frames(frames)
    kernel = kernel_wait(sample.wchan)
    if sample.state == "disk-sleep":
        kernel = f"in uninterruptible sleep (I/O) at {sample.wchan or '?'}"
    if any(f.function.endswith(INIT_FUNCTIONS) for f in library if C10D in _path(f)):
        return Place(INIT, "init_process_group", site)
    op = _collective_op(library)
    if op is not None:
        return Place(COLLECTIVE, op, site)
    if thread.idle and any(any(c in _path(f) for c in BACKWARD_CODE) for f in library):
        return Place(BACKWARD, "all_reduce", site)
    if any(DATA_CODE in _path(f) for f in frames):
        return Place(DATA, None, site, kernel if thread.idle else "")
    return Place(OWN, None, site, kernel if thread.idle else "")


def _library_frames(frames: Sequence[Site]) -> list[Site]:
    """The innermost frames up to the first of the user's own."""
    found = []
    for frame in frames:
        if is_user_frame(frame):
            break
        found.append(frame)
    return found


def _collective_op(library: Sequence[Site]) -> str | None:
    for frame in library:
        if "/torch/distributed/distributed_c10d.py" in _path(frame):
            return frame.function.rsplit(".", 1)[-1]
    for frame in library:
        if C10D in _path(frame) and "c10d_logger" not in _path(frame):
            return frame.function.rsplit(".", 1)[-1]
    return None


def _path(site: Site) -> str:
    return site.path.replace("\\", "/")


def kernel_wait(wchan: str | None) -> str:
    if not wchan:
        return ""
    for prefix, words in WCHAN_WORDS.items():
        if wchan.startswith(prefix):
            return f"{words} in the kernel ({wchan})"
    return f"waiting in the kernel ({wchan})"


def _from_proc(sample: RankSample) -> Place:
    if sample.state == "disk-sleep":
        return Place(KERNEL, detail=f"in uninterruptible sleep (I/O) at {sample.wchan or '?'}")
    if sample.state in ("zombie", "gone", "stopped"):
        return Place(KERNEL, detail=sample.state)
    kernel = kernel_wait(sample.wchan)
    return Place(UNKNOWN, detail=kernel or sample.stacks_error or "no stack")
