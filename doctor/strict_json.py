"""JSON as the standard defines it: no NaN or Infinity, which Python writes by default and
most parsers (JavaScript's, jq's, Go's) reject. Non-finite numbers become null."""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(value: Any, **options: Any) -> str:
    return json.dumps(finite(value), allow_nan=False, **options)


def finite(value: Any) -> Any:
    """A copy of a JSON value with every NaN and infinity replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
