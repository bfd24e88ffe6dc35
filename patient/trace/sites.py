"""Inside a traced rank (and read by the doctor): which frames are the user's own code.

The innermost frame that is not torch's, not this payload's and not the standard library's is
where the user called in: the line a finding names. A site-packages folder below a system
Python's standard library holds the user's own packages, so it counts as theirs.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any


def not_user_folders(torch_dir: str) -> dict[str, list[str]]:
    """Folders whose frames are not the user's: torch and this payload, and the standard
    library (but not a site-packages below it, where a system Python keeps user packages)."""
    paths = sysconfig.get_paths()
    stdlib = {paths.get("stdlib"), paths.get("platstdlib")} - {None}
    return {
        "library": sorted(os.path.join(p, "") for p in {torch_dir, _here()} if p),
        "stdlib": sorted(os.path.join(p, "") for p in stdlib if p),
    }


def is_user_file(filename: str, folders: dict[str, list[str]]) -> bool:
    if filename.startswith("<") or filename.startswith(tuple(folders.get("library", ()))):
        return False
    if filename.startswith(tuple(folders.get("stdlib", ()))):
        return "site-packages" in filename or "dist-packages" in filename
    return True


class Sites:
    """The innermost frame of the user's code: not torch, not this payload, not the stdlib."""

    def __init__(self, torch_dir: str) -> None:
        self.folders = not_user_folders(torch_dir)

    def here(self, depth: int = 2) -> list[Any] | None:
        frame: Any = sys._getframe(depth)
        while frame is not None:
            code = frame.f_code
            if is_user_file(code.co_filename, self.folders):
                return [code.co_filename, frame.f_lineno, code.co_name]
            frame = frame.f_back
        return None


def _here() -> str:
    """The payload's root folder (this file is in its trace/ subfolder)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
