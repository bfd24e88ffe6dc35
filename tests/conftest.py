"""Shared fixtures: a clean environment, and the CLI under CliRunner.

The scripts of the environment under test (`ddp-doctor`, `torchrun`) come first on PATH, as in
an activated virtualenv: the README's test command runs `.venv/bin/python -m pytest` without
activating it, and a machine may have other copies on PATH.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ddp_doctor.probes.environment import EXACT_NAMES, PREFIXES

os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

# Variables that change what the probes report; tests start without them.
AMBIENT_VARIABLES = ("JPY_PARENT_PID", "KUBERNETES_SERVICE_HOST", "NO_COLOR")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No CUDA_VISIBLE_DEVICES, NCCL_*, RANK ... from the machine running the tests."""
    for name in list(os.environ):
        if name in EXACT_NAMES or name.startswith(PREFIXES) or name in AMBIENT_VARIABLES:
            monkeypatch.delenv(name)
    yield monkeypatch


@pytest.fixture
def invoke(clean_env: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Runs `ddp-doctor ARGS` in-process; exceptions are kept on the result, never raised."""
    from ddp_doctor.cli import cli

    def run(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> Result:
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True, **kwargs)

    return run


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """GPU tests start real jobs: they belong to the slow tier too."""
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.slow)
