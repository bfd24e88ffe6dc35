"""ddp-doctor trace, torchrun --no-python: copied as `sitecustomize.py` into a folder of the
doctor's own that goes first on PYTHONPATH, since the rank is then not started by a Python the
doctor names. The first Python of each rank that starts loads the monitor (its children do
not: DDP_DOCTOR_TRACE_PID says one already has); then the user's own sitecustomize, if there
is one further down the path, runs as it would have. Standard library only.
"""

import importlib
import importlib.util
import os
import sys

CLAIM_VARIABLE = "DDP_DOCTOR_TRACE_PID"


def _load_monitor():
    if "LOCAL_RANK" not in os.environ or os.environ.get(CLAIM_VARIABLE):
        return
    os.environ[CLAIM_VARIABLE] = str(os.getpid())
    try:
        monitor = importlib.import_module("ddp_doctor_patient.trace.monitor")
        recorder = monitor.install_from_environment(entry="no-python")
    except Exception as error:  # never keep the user's Python from starting
        sys.stderr.write(f"ddp-doctor: the trace monitor did not load: {error}\n")
        return
    previous = sys.excepthook

    def excepthook(kind, error, trace):
        monitor.record_exception(recorder, error)
        previous(kind, error, trace)

    sys.excepthook = excepthook


def _chain_to_the_users_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        if importlib.util.find_spec("sitecustomize") is not None:
            importlib.import_module("sitecustomize")
    finally:
        sys.path[:] = saved
        if "sitecustomize" not in sys.modules and mine is not None:
            sys.modules["sitecustomize"] = mine


_load_monitor()
_chain_to_the_users_sitecustomize()
