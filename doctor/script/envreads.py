"""Which string constants of a script only name an environment variable to read it (DDP124)."""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import ScriptFacts

RENAMED_NCCL_VARIABLES = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}

_ENVIRONMENT_READERS = ("get", "getenv", "pop")


def environment_reads(facts: ScriptFacts) -> set[int]:
    """Ids of the string constants that only name a variable to read it: `"NAME" in
    os.environ`, os.environ.get/pop("NAME"), os.getenv("NAME"), a loaded os.environ["NAME"]
    (a shim that copies the old name to the new one sets nothing under the old name)."""
    found: set[int] = set()
    for site in facts.calls:
        if site.key in _ENVIRONMENT_READERS and site.node.args:
            found.add(id(site.node.args[0]))
    for node in ast.walk(facts.tree) if facts.tree is not None else ():
        if isinstance(node, ast.Compare) and all(
            isinstance(op, ast.In | ast.NotIn) for op in node.ops
        ):
            found.add(id(node.left))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load | ast.Del):
            found.add(id(node.slice))
    return found
