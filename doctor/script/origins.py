"""What the data flow answers with: the places that made a value (values.py)."""

from __future__ import annotations

import ast

from ddp_doctor.script.facts import ClassInfo, ScriptFacts

CALL = "call"  # a call we do not see through
CONSTANT = "constant"
OPTION = "option"  # an attribute of an argparse namespace
ENV = "env"
SPAWN_INDEX = "spawn-index"  # the first argument mp.spawn passes: the process index
PARAM = "param"  # a parameter with no caller in the tree
ATTRIBUTE = "attribute"  # an attribute of something unknown
INSTANCE = "instance"  # an instance of a class of the tree
DEFINITION = "definition"  # a function or class of the tree itself
NAME = "name"  # a name imported from outside the tree, or unknown
OTHER = "other"  # any other expression (arithmetic, f-strings, ...)


class Origin:
    __slots__ = ("cls", "facts", "kind", "name", "node")

    def __init__(
        self,
        kind: str,
        node: ast.AST | None,
        facts: ScriptFacts | None = None,
        name: str = "",
        cls: ClassInfo | None = None,
    ) -> None:
        self.kind, self.node, self.facts, self.name, self.cls = kind, node, facts, name, cls

    def _key(self) -> tuple[str, int, str]:
        return (self.kind, id(self.node), self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Origin) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        text = ast.unparse(self.node) if isinstance(self.node, ast.expr) else ""
        return f"Origin({self.kind}, {self.name or text!r})"

    @property
    def qualname(self) -> str | None:
        """For a CALL: what it calls, through the imports of its file."""
        if self.kind == CALL and isinstance(self.node, ast.Call) and self.facts is not None:
            return self.facts.qualname(self.node.func)
        return None

    @property
    def call(self) -> ast.Call | None:
        return self.node if isinstance(self.node, ast.Call) else None


Origins = frozenset[Origin]
NOTHING: Origins = frozenset()
