"""The NCCL variables a node's nccl.conf files set. NCCL reads NCCL_CONF_FILE (2.23 on; before, the user's
~/.nccl.conf) and /etc/nccl.conf once per process as KEY=VALUE lines ('#' starts a comment) and
sets each variable only where the environment has none (setenv without overwrite:
NVIDIA/nccl src/misc/param.cc). So a NCCL_DEBUG_FILE there would receive the INFO lines a
NCCL_DEBUG=INFO of the doctor's asked for: readings/nccl_debug.py leaves NCCL's logging alone
where these files decide it. Read bounded: regular files only, opened without blocking, at most
READ_BYTES each."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

READ_BYTES = 64 * 1024
NAMES = ("NCCL_DEBUG", "NCCL_DEBUG_FILE")


ETC_CONF = Path("/etc/nccl.conf")


def nccl_conf_variables(
    environ: dict[str, str] | None = None, etc: Path = ETC_CONF, home: str | None = None
) -> dict[str, tuple[str, str]]:
    """NCCL_DEBUG / NCCL_DEBUG_FILE -> (value, the file that sets it), as NCCL would read
    them (the first file to set a variable wins)."""
    environ = dict(os.environ) if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    for path in conf_files(environ, etc, home):
        for name, value in _pairs(_small_regular(path)):
            if name in NAMES and name not in found:
                found[name] = (value, str(path))
    return found


def conf_files(
    environ: dict[str, str], etc: Path = ETC_CONF, home: str | None = None
) -> list[Path]:
    """NCCL_CONF_FILE (read from NCCL 2.23 on, instead of ~/.nccl.conf), ~/.nccl.conf (read
    before 2.23, and from 2.23 where NCCL_CONF_FILE is unset), /etc/nccl.conf: all three, so
    that whichever this NCCL reads counts."""
    own = (environ.get("NCCL_CONF_FILE") or "").strip()
    if home is None:
        try:  # as NCCL finds it: the password database, not $HOME
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = environ.get("HOME") or ""
    first = [Path(own)] if own else []
    first += [Path(home) / ".nccl.conf"] if home else []
    return [*first, etc]


def _pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        if line.startswith("#") or "=" not in line:
            continue
        name, value = line.split("=", 1)
        pairs.append((name, value))
    return pairs


def _small_regular(path: Path) -> str:
    """The file's first READ_BYTES where it is a regular file; "" otherwise (a FIFO or a
    device never blocks this)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return ""
        return os.read(handle, READ_BYTES).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(handle)
