"""Numeric options that are finite and bounded: nan, inf and absurd values are usage errors.

click's FloatRange lets nan and inf through (`trace --timeout nan` once stopped a hanging
script after a second and reported nothing), and an integer of 5,000 digits is a ValueError
deep inside Python; every number an option takes goes through these instead.
"""

from __future__ import annotations

import math
from typing import Any

import click

MAX_TIMEOUT_S = 86400.0  # a day: past that a bound bounds nothing
MAX_COUNT = 1_000_000_000  # steps, epochs: more than any run makes
MAX_DIGITS = 30  # an integer option with more digits is no count of anything


class FiniteFloat(click.ParamType):
    """A number in [low, high]."""

    name = "float"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(str(value)[:400])
            except (TypeError, ValueError):
                self.fail(f"{str(value)[:40]!r} is not a number", param, ctx)
        if not math.isfinite(number) or not self.low <= number <= self.high:
            self.fail(
                f"{str(value)[:40]!r} is not a number from {self.low:g} to {self.high:g}",
                param,
                ctx,
            )
        return number


class BoundedInt(click.ParamType):
    """A whole number in [low, high], refused before Python's digit limit is reached."""

    name = "integer"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            if len(text) > MAX_DIGITS or not text.lstrip("+-").isdigit():
                self.fail(f"{text[:40]!r} is not a whole number", param, ctx)
            number = int(text)
        if not self.low <= number <= self.high:
            self.fail(f"{number} is not a whole number from {self.low} to {self.high}", param, ctx)
        return number
