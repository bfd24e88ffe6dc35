"""DDP124: NCCL_* variables that torch renamed TORCH_NCCL_*, set in code or launch files."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ddp_doctor.model import Remediation
from ddp_doctor.registry import Hit, rule
from ddp_doctor.script.envreads import RENAMED_NCCL_VARIABLES as _RENAMED_NCCL_VARIABLES
from ddp_doctor.script.envreads import environment_reads
from ddp_doctor.script.facts import ScriptFacts
from ddp_doctor.script.hits import ScriptHit, location
from ddp_doctor.script.textscan import renamed_nccl_variables


@rule(
    "DDP124",
    Remediation(
        "Use the TORCH_NCCL_* names: TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_BLOCKING_WAIT, "
        "TORCH_NCCL_DESYNC_DEBUG."
    ),
)
def deprecated_nccl_env_in_code(facts: ScriptFacts) -> Iterator[Hit]:
    """What it finds:
        NCCL_ASYNC_ERROR_HANDLING, NCCL_BLOCKING_WAIT and NCCL_DESYNC_DEBUG as string keys in
        Python (os.environ[...] = ..., setdefault, an env dict), and `export NAME=` or
        `NAME=` in shell, YAML and Makefiles. A name only read (`"NAME" in os.environ`,
        os.environ.get("NAME"), os.getenv, a loaded os.environ["NAME"]: a shim that copies
        the old setting to the new name) sets nothing.
    Why it matters:
        torch reads the TORCH_NCCL_* names; the old ones only warn, and will be ignored. The
        error handling or debugging the line meant to turn on is silently not what runs.
    Example:
        os.environ["NCCL_ASYNC_ERROR_HANDLING"] = "1"
    Fix:
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
    """
    if not facts.is_python:
        if facts.path.endswith(".md"):
            return  # prose about the old names is not a setting
        for line, column, name in renamed_nccl_variables(facts.lines):
            yield _renamed_hit(facts, name, line=line, column=column)
        return
    renamed = [
        constant
        for constant in facts.strings
        if isinstance(constant.value, str) and constant.value in _RENAMED_NCCL_VARIABLES
    ]
    read = environment_reads(facts) if renamed else set()
    for constant in renamed:
        if id(constant) not in read:
            yield _renamed_hit(facts, constant.value, node=constant)


def _renamed_hit(
    facts: ScriptFacts, name: str, *, node: ast.AST | None = None, line: int = 1, column: int = 0
) -> Hit:
    new = _RENAMED_NCCL_VARIABLES[name]
    return ScriptHit(
        f"{name} was renamed {new}: set {new} instead",
        {"variable": name},
        location=location(facts, node, line=line, column=column),
        cause=name,
    )
