"""Inside a traced rank: installs the monitor before the user's code runs.

`install_from_environment` (called by trace/boot.py, or by the sitecustomize shim under torchrun
--no-python) opens the rank's journal, starts the watchdog and the monitor thread, lets
faulthandler dump every thread's stack on the doctor's signal, and waits for `import torch`:
the wrappers go in the moment torch has been imported, so the script's own imports and
environment settings (CUDA_VISIBLE_DEVICES before CUDA starts) happen as they would without
the doctor. Imports only the stdlib and the payload's own modules.
"""

from __future__ import annotations

import atexit
import faulthandler
import importlib.abc
import importlib.util
import json
import os
import platform
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..watchdog import watch_doctor
from .output import route_output
from .recorder import CONFIG_FILE, TRACE_VARIABLE, Recorder

_KEPT: list[Any] = []  # the stacks file stays open for faulthandler as long as the process lives


def stack_signal() -> int:
    """A real-time signal no training script uses, so faulthandler claims nobody's signal."""
    base = getattr(signal, "SIGRTMIN", None)
    return int(base) + 6 if base is not None else int(signal.SIGUSR2)


def install_from_environment(entry: str) -> Recorder | None:
    folder = os.environ.get(TRACE_VARIABLE)
    if not folder:
        return None
    config = json.loads((Path(folder) / CONFIG_FILE).read_text())
    recorder = Recorder(Path(folder), config)
    if config.get("stream_output"):
        route_output(Path(folder), recorder.rank)
    signum = stack_signal()
    recorder.hello(
        entry=entry,
        argv=list(sys.argv),
        executable=sys.executable,
        python=platform.python_version(),
        cwd=os.getcwd(),
        main_thread=threading.main_thread().ident,
        stack_signal=signum,
    )
    watch_doctor()
    stacks = open(recorder.stacks_path, "a")  # noqa: SIM115  (open for the process's life)
    _KEPT.append(stacks)
    faulthandler.register(signum, file=stacks, all_threads=True, chain=False)
    recorder.start_thread()
    atexit.register(_at_exit, recorder)
    when_imported("torch", lambda torch: _patch(torch, recorder))
    return recorder


def _patch(torch: Any, recorder: Recorder) -> None:
    try:
        from .data_patches import DataPatches
        from .patches import DistributedPatches
        from .sites import Sites

        sites = Sites(os.path.dirname(os.path.abspath(torch.__file__)))
        recorder.event(
            "torch",
            version=str(torch.__version__),
            cuda_build=torch.version.cuda,
            not_user=sites.folders,
            flight_recorder=os.environ.get("TORCH_FR_BUFFER_SIZE"),
        )
        DistributedPatches(torch, recorder, sites).apply()
        DataPatches(torch, recorder, sites).apply()
    except Exception as error:  # a torch this monitor does not know: trace what still works
        recorder.event("monitor_error", where="install", error=f"{type(error).__name__}: {error}")


def record_exception(recorder: Recorder | None, error: BaseException) -> None:
    if recorder is None:
        return
    frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(error.__traceback__)]
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        frames.append([error.filename, error.lineno, "<module>"])  # the line that does not parse
    recorder.event(
        "exception",
        type=type(error).__name__,
        message=str(error)[:2000],
        frames=frames[-40:],
    )


def _at_exit(recorder: Recorder) -> None:
    recorder.event(
        "exit_state",
        steps=recorder.steps,
        epochs=recorder.epochs,
        completed=recorder.completed,
        written=recorder.written,
        **recorder.flight_recorder_tail(),
    )
    recorder.write_progress()


# -- after `import torch` --------------------------------------------------------------------
def when_imported(name: str, callback: Callable[[Any], None]) -> None:
    """Calls `callback(module)` once `name` has been imported (now, if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[Any], None]) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # what the import would find without us
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenCall(spec.loader, self.callback)
        return spec


class _ThenCall(importlib.abc.Loader):
    """The real loader, and the callback once the module has run."""

    def __init__(self, loader: Any, callback: Callable[[Any], None]) -> None:
        self.loader = loader
        self.callback = callback

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.loader  # the module sees its own loader, not this one
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
