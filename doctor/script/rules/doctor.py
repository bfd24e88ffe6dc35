"""The doctor's own findings for `check`: a file that does not parse, or cannot be read."""

from __future__ import annotations

from ddp_doctor.model import Remediation
from ddp_doctor.registry import describe

SYNTAX_ERROR = "DDP910"
FILE_UNREADABLE = "DDP911"

describe(
    SYNTAX_ERROR,
    Remediation("Fix the syntax error; the other rules could not look at this file."),
    """What it finds:
        A .py file given to `check` (or found under a directory) that Python's parser rejects,
        with the parser's message, line and column. In a notebook, a code cell that does not
        parse on its own (a shell line pasted without `!`) is left out as info, at its cell,
        and the other cells are checked; only a notebook that still does not parse without
        such cells is an error.
    Why it matters:
        The file would fail at import on every rank anyway, and none of the DDP1xx rules could
        look at it: a clean report would mean nothing for this file.
    Example:
        def train(:
    Fix:
        Fix the syntax error (run `python -m py_compile FILE` to see it), then check again.
    """,
)

describe(
    FILE_UNREADABLE,
    Remediation("Check the path and its permissions; save Python sources as UTF-8."),
    """What it finds:
        Missing paths, files without read permission, symlink loops, binary files, files that
        are not valid UTF-8 (nor in their declared encoding) and files over the size limit.
    Why it matters:
        Nothing in that file was checked. The other files still are; `check` exits 2 only
        when no file at all could be checked.
    Example:
        ddp-doctor check missing_train.py
    Fix:
        Point `check` at readable UTF-8 text files, or exclude the path with --exclude.
    """,
)
