"""Simple shell variables in launch files: `method='unimatch'` then `... launch $method.py`.

A launch script often names the script it starts through a variable assigned a literal in
the same file (UniMatch's scripts/train.sh: `method='unimatch'` ... `$method.py`). Such a
variable is replaced by its value before the launch line is read: only a name assigned
exactly once in the file, at the start of a line (`export`, `local`, `readonly` allowed), with a literal value (no
`$`, backquote, space or glob in it). Anything else (a positional `$1`, a value from a
command, a name assigned twice) stays as written and names no script. Makefiles are left as
they are: `$(VAR)` is their syntax, and `$VAR` means something else there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

_ASSIGNMENT = re.compile(
    r"""^\s*(?:export\s+|local\s+|readonly\s+)?([A-Za-z_]\w*)=(?:'([^'$`\s*?]*)'|"([^"$`\s*?]*)"|([^\s'"$`;&|*?()]*))\s*(?:[;#].*)?$"""
)
_ANY_ASSIGNMENT = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+)?([A-Za-z_]\w*)=")
_REFERENCE = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")


def expand_variables(path: str, lines: Sequence[str]) -> list[str]:
    """The lines with each simple variable of the file replaced by its literal value."""
    if _is_makefile(path) or "$" not in "".join(lines):
        return list(lines)
    values = _literal_values(lines)
    if not values:
        return list(lines)
    return [_REFERENCE.sub(lambda m: _value(m, values), line) for line in lines]


def _literal_values(lines: Sequence[str]) -> dict[str, str]:
    seen: dict[str, str | None] = {}
    for line in lines:
        named = _ANY_ASSIGNMENT.match(line)
        if named is None:
            continue
        name, match = named.group(1), _ASSIGNMENT.match(line)
        value = next((g for g in match.groups()[1:] if g is not None), "") if match else None
        seen[name] = None if name in seen else value
    return {name: value for name, value in seen.items() if value}


def _value(match: re.Match[str], values: dict[str, str]) -> str:
    name = match.group(1) or match.group(2)
    return values.get(name, match.group(0))


def _is_makefile(path: str) -> bool:
    name = os.path.basename(path).lower()
    return name.startswith(("makefile", "gnumakefile")) or name.endswith(".mk")
