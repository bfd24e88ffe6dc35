"""The command line's defaults from `[tool.ddp-doctor]` in the nearest pyproject.toml above
the working folder: fail-on and format for every command, select and ignore for those other
than `check` (which applies them per file). An option given on the command line wins; a
format the command does not have is passed over."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from click.core import ParameterSource

from ddp_doctor.script.config import ConfigError, config_here

__all__ = ["ConfigError", "apply_config_defaults"]


def apply_config_defaults(kwargs: dict[str, Any], formats: Sequence[str], selects: bool) -> None:
    """Fills the report options left at their default in `kwargs`; raises ConfigError for a
    [tool.ddp-doctor] table that cannot be used."""
    context = click.get_current_context()

    def unset(name: str) -> bool:
        return context.get_parameter_source(name) in (ParameterSource.DEFAULT, None)

    config = config_here()
    if config.fail_on and unset("fail_on"):
        kwargs["fail_on"] = config.fail_on
    if config.format in formats and unset("fmt"):
        kwargs["fmt"] = config.format
    if selects and config.select and not kwargs["select"]:
        kwargs["select"] = config.select
    if selects and config.ignore:
        kwargs["ignore"] = (*config.ignore, *kwargs["ignore"])
