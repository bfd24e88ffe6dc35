"""Network namespaces for tests and fixture recording: a host whose network is broken on
purpose. Each is named `ddh-` plus a random suffix and is always deleted afterwards; where
namespaces cannot be made (not root, no iproute2, a container without CAP_SYS_ADMIN) the
reason is returned so that tests can skip with it."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Sequence

PREFIX = "ddh-"


def _ip(*args: str, timeout: float = 10) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)


def why_unavailable() -> str | None:
    """None when a namespace can be made and removed here, else why not."""
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    try:
        with namespace():
            pass
    except (OSError, subprocess.SubprocessError, NamespaceError) as error:
        return f"cannot make a network namespace here: {error}"
    return None


class NamespaceError(RuntimeError):
    pass


@contextlib.contextmanager
def namespace(setup: Sequence[Sequence[str]] = ()) -> Iterator[str]:
    """A fresh namespace (only a loopback, and that down) after `ip netns exec NAME` runs each
    command of `setup` in it; deleted on the way out, whatever happened."""
    name = PREFIX + secrets.token_hex(4)
    made = _ip("netns", "add", name)
    if made.returncode != 0:
        raise NamespaceError(made.stderr.strip() or f"ip netns add exited {made.returncode}")
    try:
        for command in setup:
            done = _ip("netns", "exec", name, *command)
            if done.returncode != 0:
                raise NamespaceError(f"{' '.join(command)}: {done.stderr.strip()}")
        yield name
    finally:
        _ip("netns", "del", name)


def in_namespace(name: str, argv: Sequence[str]) -> list[str]:
    """argv run inside the namespace."""
    return ["ip", "netns", "exec", name, *argv]
