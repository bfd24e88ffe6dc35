"""NCCL's INFO lines for the doctor's own job: when the doctor asks for them, and why they
are missing when they are.

The NCCL rungs of the ladder (readings/ladder.py) are read from NCCL's INFO lines, so where the
doctor's own job uses NCCL across nodes the doctor sets NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,NET for that job (the "NET/IB : Using", "Using network" and
"Channel ... via NET/IB/0/GDRDMA" lines are INFO(NCCL_INIT | NCCL_NET) in NVIDIA/nccl's
src/transport/net.cc and src/init.cc). A user's own NCCL_DEBUG stands: the job tests the
user's settings, so the doctor adds nothing then, and the rungs say why they were not read. A
NCCL_DEBUG_FILE of the user's sends NCCL's lines into the user's file: the doctor then sets
nothing either (it writes nowhere outside its own folder, and cannot read that file's lines
back as the job's). The same holds where a nccl.conf (NCCL_CONF_FILE, ~/.nccl.conf,
/etc/nccl.conf) sets either: NCCL takes those only where the environment has none, so the
doctor's NCCL_DEBUG would override them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from ddp_doctor.facts.job import Identity

DOCTOR_NCCL_DEBUG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


def logging_owner(
    variables: Mapping[str, str], conf: Mapping[str, tuple[str, str]] | None = None
) -> str | None:
    """Who decides NCCL's logging on this node, where the user does: the environment, or an
    nccl.conf file (probes/job/nccl_conf.py: name -> (value, file)); None where nobody."""
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_FILE"):
        if _set(variables, name):
            return f"{name}={_shown(variables[name])} in your environment"
    for name in ("NCCL_DEBUG", "NCCL_DEBUG_FILE"):
        value, where = (conf or {}).get(name, ("", ""))
        if value.strip():
            return f"{name}={_shown(value)} in {_shown(where, 64)}"
    return None


def doctor_nccl_env(
    variables: Mapping[str, str],
    nccl_across_nodes: bool,
    conf: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, str]:
    """What the doctor sets for its own job so that NCCL names its network; empty where the
    job runs no NCCL between nodes or the user (environment or nccl.conf) decides NCCL's
    logging."""
    if not nccl_across_nodes or logging_owner(variables, conf) is not None:
        return {}
    return dict(DOCTOR_NCCL_DEBUG)


def lines_missing_why(
    variables: Mapping[str, str], doctor_env: Mapping[str, str], owner: str | None = None
) -> str:
    """Why NCCL's INFO lines are not in the job's output; `owner`: what the job's plan
    recorded as deciding NCCL's logging (JobFacts.nccl_logging)."""
    if doctor_env.get("NCCL_DEBUG") == "INFO":
        return "NCCL printed no INFO lines though the doctor set NCCL_DEBUG=INFO for its job"
    owner = owner or logging_owner(variables)
    if owner is not None and "NCCL_DEBUG_FILE" in owner:
        return f"{owner} sends NCCL's lines to a file of yours, which the doctor does not read"
    if owner is not None:
        return (
            f"{owner} stands (the doctor does not override it), and NCCL printed no INFO "
            "lines to read these rungs from"
        )
    return "NCCL's INFO lines are not in the job's output (set NCCL_DEBUG=INFO)"


def _set(variables: Mapping[str, str], name: str) -> bool:
    return bool((variables.get(name) or "").strip())


def _shown(value: str, longest: int = 16) -> str:
    printable = "".join(c for c in value if c.isprintable())
    return printable[:longest] + ("..." if len(printable) > longest else "")


def without_doctor_env(
    identities: Sequence[Identity], doctor_env_of: Callable[[Identity], Mapping[str, str]]
) -> tuple[Identity, ...]:
    """The ranks' variables as the user set them: those the doctor set for its own job on the
    rank's node left out (they would read as the user's in the node groups and DDP2xx)."""
    found = []
    for identity in identities:
        own = doctor_env_of(identity)
        if any(identity.variables.get(name) == value for name, value in own.items()):
            variables = {k: v for k, v in identity.variables.items() if own.get(k) != v}
            identity = dataclasses.replace(identity, variables=variables)
        found.append(identity)
    return tuple(found)
