"""Faults the test suite injects into a rank of the doctor's job, to prove each failure is named.

Not shipped, and nothing of the package knows about it: tests/fakes.py `job_fault` puts this
folder on the PYTHONPATH the job inherits (after the payload) and names the fault in
DDP_DOCTOR_TEST_FAULT; this folder's sitecustomize then wraps the worker's functions by name as
the rank imports them. Spec: "RANK:STAGE:ACTION", ACTION one of crash (raise), exit (exit code
7), kill (SIGKILL itself), stall (sleep until killed), corrupt (add 1 to the first 100 elements
of its all-reduce contributions; only at stage allreduce), or torch=VERSION (the rank reports
that torch version at stage identity, as a node with another torch would).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

VARIABLE = "DDP_DOCTOR_TEST_FAULT"
PATIENT = "ddp_doctor_patient"
ACTIONS = ("crash", "exit", "kill", "stall", "corrupt", "torch")
STAGES = ("init", "identity", "allreduce", "ddp", "bandwidth", "memory")  # Worker's methods
ONLY_AT = {"corrupt": "allreduce", "torch": "identity"}  # faults of one stage
CORRUPTED_ELEMENTS = 100


@dataclass(frozen=True)
class Fault:
    rank: int
    stage: str
    action: str
    value: str | None = None

    def strike(self) -> None:
        """At the start of the stage, inside the worker's guard (a crash is a failed stage)."""
        if self.action == "crash":
            raise RuntimeError(f"ddp-doctor test fault: rank {self.rank} crashes at {self.stage}")
        if self.action == "exit":
            os._exit(7)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "stall":
            while True:
                time.sleep(60)


def parse_fault(spec: str) -> Fault:
    rank, stage, action = spec.split(":")
    action, _, value = action.partition("=")
    if action not in ACTIONS:
        raise ValueError(f"unknown test fault action {action!r}")
    if stage not in STAGES:
        raise ValueError(f"unknown job stage {stage!r}")
    if ONLY_AT.get(action, stage) != stage:
        raise ValueError(f"{action} is a fault of one stage only, not {stage!r}")
    return Fault(int(rank), stage, action, value or None)


# --- the wrappers, one per module of the patient they change --------------------------------
def strike_at_stage(fault: Fault) -> Callable[[ModuleType], None]:
    def wrap(worker: ModuleType) -> None:
        stage = getattr(worker.Worker, fault.stage)

        def stage_with_fault(self: Any) -> Any:
            if self.rank == fault.rank:
                fault.strike()
            return stage(self)

        setattr(worker.Worker, fault.stage, stage_with_fault)

    return wrap


def corrupt_allreduce(fault: Fault) -> Callable[[ModuleType], None]:
    def wrap(module: ModuleType) -> None:
        check = module.check_allreduce

        def check_with_wrong_inputs(torch: Any, rank: int, *rest: Any) -> Any:
            if rank != fault.rank:
                return check(torch, rank, *rest)
            all_reduce = torch.distributed.all_reduce

            def all_reduce_off_by_one(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                tensor[:CORRUPTED_ELEMENTS] += 1
                return all_reduce(tensor, *args, **kwargs)

            torch.distributed.all_reduce = all_reduce_off_by_one
            try:
                return check(torch, rank, *rest)
            finally:
                torch.distributed.all_reduce = all_reduce

        module.check_allreduce = check_with_wrong_inputs

    return wrap


def report_torch_version(fault: Fault) -> Callable[[ModuleType], None]:
    def wrap(module: ModuleType) -> None:
        describe = module.describe_rank

        def describe_with_version(torch: Any, rank: int, *rest: Any) -> dict[str, Any]:
            identity = describe(torch, rank, *rest)
            return {**identity, "torch_version": fault.value} if rank == fault.rank else identity

        module.describe_rank = describe_with_version

    return wrap


def wrappers_for(fault: Fault) -> dict[str, Callable[[ModuleType], None]]:
    """Module name -> what to change in it once it is imported."""
    if fault.action == "corrupt":
        return {f"{PATIENT}.exact_collectives": corrupt_allreduce(fault)}
    if fault.action == "torch":
        return {f"{PATIENT}.identity": report_torch_version(fault)}
    return {f"{PATIENT}.worker": strike_at_stage(fault)}


class WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it lets the other finders find a module, then changes the module
    right after it runs (before any `from ... import` of it takes a name)."""

    def __init__(self, wrappers: dict[str, Callable[[ModuleType], None]]) -> None:
        self.wrappers = wrappers

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        wrap = self.wrappers.get(name)
        if wrap is None:
            return None
        spec = next(
            (
                found
                for finder in sys.meta_path
                if finder is not self and hasattr(finder, "find_spec")
                if (found := finder.find_spec(name, path, target)) is not None
            ),
            None,
        )
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module  # type: ignore[attr-defined]

        def run_then_wrap(module: ModuleType) -> None:
            run_module(module)
            wrap(module)

        spec.loader.exec_module = run_then_wrap  # type: ignore[method-assign]
        return spec


def install(spec: str) -> None:
    sys.meta_path.insert(0, WrapOnImport(wrappers_for(parse_fault(spec))))
