"""DDP011-DDP012: the launcher variables and the Python that trains."""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.facts.machine import OLDEST_PATIENT_PYTHON, FactSet
from ddp_doctor.model import ProbeStatus, Remediation
from ddp_doctor.readings.python_choice import pick_another_python
from ddp_doctor.registry import Hit, rule

NUMERIC_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


@rule(
    "DDP011",
    Remediation(
        "Unset the stale variables (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_* for "
        "each rank itself), or give them consistent whole numbers.",
        ("unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE",),
    ),
)
def launch_env_invalid(facts: FactSet) -> Iterator[Hit]:
    """What it finds: a value that is not a whole number (or is negative), a port outside
    1-65535, RANK not below WORLD_SIZE, LOCAL_RANK not below LOCAL_WORLD_SIZE.
    Why it matters: env:// initialisation reads them: "invalid literal for int()", or ranks
    that wait forever for a peer that cannot exist. Often left over from a previous job.
    Example: `WORLD_SIZE=abc`, `LOCAL_RANK=-1` exported in a shell profile.
    Fix: unset them and let torchrun set them.
    """
    env = facts.env
    numbers: dict[str, int] = {}
    for name in NUMERIC_VARIABLES:
        value = env.get(name)
        if value is None:
            continue
        if not value.strip().isdigit():
            yield Hit(
                f"{name}={value!r} is not a non-negative whole number",
                {"variable": name, "value": value},
            )
        else:
            numbers[name] = int(value)
    port = env.get("MASTER_PORT")
    if port is not None and not (port.strip().isdigit() and 0 < int(port) < 65536):
        yield Hit(
            f"MASTER_PORT={port!r} is not a port number (1-65535)",
            {"variable": "MASTER_PORT", "value": port},
        )
    for rank, size in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        if rank in numbers and size in numbers and numbers[rank] >= numbers[size]:
            yield Hit(
                f"{rank}={numbers[rank]} is not below {size}={numbers[size]}",
                {"variable": rank, "value": numbers[rank], "limit": numbers[size]},
            )


@rule(
    "DDP012",
    Remediation(
        "Point the doctor at the interpreter you train with (`ddp-doctor run --python "
        "PATH/TO/python`, or activate its virtualenv or conda env first); that Python needs "
        f"{OLDEST_PATIENT_PYTHON[0]}.{OLDEST_PATIENT_PYTHON[1]} or newer (current torch needs "
        "3.10 or newer).",
        ("which -a python3 python", "python3 -c 'import sys; print(sys.version)'"),
    ),
)
def python_unusable(facts: FactSet) -> Iterator[Hit]:
    """What it finds: the Python chosen as the patient (`--python`, the active virtualenv or
    conda env, or python3 on PATH) is missing, does not start, does not answer within the
    probe's time (a Python that hangs cannot train either), or is older than the job needs.
    Why it matters: nothing of torch could be examined and no job was launched, so the report
    says nothing about the environment you train in.
    Example: `--python ~/venvs/old/bin/python` naming a deleted venv; a Python 3.7 on PATH.
    Fix: name the interpreter you train with; upgrade a Python that is too old.
    """
    python = facts.python
    probe = facts.results.get("python")
    if python is None and probe is not None and probe.status is ProbeStatus.TIMED_OUT:
        yield Hit(  # a Python that hangs cannot train either: never only a DDP902 warning
            f"the Python that trains did not answer: {probe.error}",
            {"probe": "python", "timed_out": True, "seconds": probe.duration_s},
        )
    if python is None:
        return
    evidence = {"python": python.executable, "chosen_by": python.chosen_by}
    if not python.runs:
        yield Hit(
            f"{python.executable} ({python.chosen_by}) does not run: {python.error}",
            evidence,
            fix=pick_another_python(python, "Name the Python you train with")
            if python.candidates
            else None,
        )
    elif python.too_old:
        yield Hit(
            f"{python.executable} is Python {python.version}, older than "
            f"{OLDEST_PATIENT_PYTHON[0]}.{OLDEST_PATIENT_PYTHON[1]}",
            {**evidence, "version": python.version},
        )
