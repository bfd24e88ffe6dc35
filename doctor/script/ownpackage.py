"""Absolute imports of the repository's own package where the checked folder is that package:
facebookresearch/mae_st keeps main_pretrain.py and util/ at its root, is installed as the
package `mae_st`, and imports `mae_st.util.misc`. A clone named mae_st (or mae-st) holds
util/misc.py, not mae_st/util/misc.py; the rest of the name is looked up in the folder whose
name is the package."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def in_own_package(
    bases: list[str], module: str, file_at: Callable[[str, str], T | None]
) -> T | None:
    top, _, rest = module.partition(".")
    if not rest:
        return None
    for base in bases:
        if os.path.basename(base).replace("-", "_") == top:
            found = file_at(base, rest)
            if found is not None:
                return found
    return None
