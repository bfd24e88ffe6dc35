"""Simulated hosts for multi-node tests: Linux network namespaces joined by veth pairs.

Each host is a namespace named `ddm-<random>-<i>` with its own /etc/hosts (`ip netns exec`
binds /etc/netns/NAME/hosts over /etc/hosts) and, through `unshare --uts`, its own host name.
Two hosts share one veth pair; three hang off a bridge in a fourth namespace. Addresses are
10.2xx.0.N and exist only inside the namespaces. Everything is removed by `close()`, which
kills whatever still runs inside the namespaces first (only processes these tests started
run there). Needs root and iproute2; `why_unavailable()` says why not where they are missing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import netns

PREFIX = "ddm-"
NETNS_ETC = Path("/etc/netns")
LOOPBACK_NAME_ADDRESS = "127.0.1.1"  # what Debian's installer maps the host's own name to


def why_unavailable() -> str | None:
    """None when namespaces can be made here, else why not (the tests then skip)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return netns.why_unavailable()


def _ip(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


class SimulatedHosts:
    """`count` hosts named node0, node1 ... on one subnet; `hosts_file(i)` says what host i's
    /etc/hosts holds (by default every name maps to its real address)."""

    def __init__(self, count: int, loopback_own_name: Sequence[int] = ()) -> None:
        self.count = count
        suffix = secrets.token_hex(3)
        self.subnet = f"10.{200 + int(suffix[:2], 16) % 56}.0"
        self.namespaces = [f"{PREFIX}{suffix}-{i}" for i in range(count)]
        self.switch = f"{PREFIX}{suffix}-sw" if count > 2 else None
        self.hostnames = [f"node{i}" for i in range(count)]
        self.addresses = [f"{self.subnet}.{i + 1}" for i in range(count)]
        self.interface = "eth1"
        self.loopback_own_name = set(loopback_own_name)
        try:
            self._create()
        except Exception:
            self.close()
            raise

    def _create(self) -> None:
        for namespace in self.namespaces:
            _ip("netns", "add", namespace, check=True)
            _ip("-n", namespace, "link", "set", "lo", "up", check=True)
        if self.switch is None:
            first, second = self.namespaces
            _ip("link", "add", self.interface, "netns", first, "type", "veth", "peer", "name",
                self.interface, "netns", second, check=True)  # fmt: skip
        else:
            self._create_switch()
        for i, namespace in enumerate(self.namespaces):
            _ip("-n", namespace, "addr", "add", f"{self.addresses[i]}/24", "dev", self.interface,
                check=True)  # fmt: skip
            _ip("-n", namespace, "link", "set", self.interface, "up", check=True)
            self.write_hosts_file(i)

    def _create_switch(self) -> None:
        assert self.switch is not None
        _ip("netns", "add", self.switch, check=True)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge", check=True)
        _ip("-n", self.switch, "link", "set", "br0", "up", check=True)
        for i, namespace in enumerate(self.namespaces):
            port = f"p{i}"
            _ip("link", "add", self.interface, "netns", namespace, "type", "veth", "peer", "name",
                port, "netns", self.switch, check=True)  # fmt: skip
            _ip("-n", self.switch, "link", "set", port, "master", "br0", check=True)
            _ip("-n", self.switch, "link", "set", port, "up", check=True)

    def write_hosts_file(self, node: int, extra: str = "") -> None:
        lines = ["127.0.0.1 localhost"]
        for i, name in enumerate(self.hostnames):
            own_on_loopback = i == node and node in self.loopback_own_name
            lines.append(
                f"{LOOPBACK_NAME_ADDRESS if own_on_loopback else self.addresses[i]} {name}"
            )
        folder = NETNS_ETC / self.namespaces[node]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text("\n".join(lines) + "\n" + extra)

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """argv run on host `node`: in its namespace, under its own host name."""
        return [
            "ip", "netns", "exec", self.namespaces[node],
            "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.hostnames[node],
            *argv,
        ]  # fmt: skip

    def run_in(
        self, node: int, argv: Sequence[str], timeout: float = 20
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(node, argv), capture_output=True, text=True, timeout=timeout, check=False
        )

    def pids(self) -> list[int]:
        found = []
        for namespace in [*self.namespaces, *([self.switch] if self.switch else [])]:
            listed = _ip("netns", "pids", namespace)
            found += [int(p) for p in listed.stdout.split() if p.isdigit()]
        return found

    def close(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for namespace in [*self.namespaces, *([self.switch] if self.switch else [])]:
            _ip("netns", "del", namespace)
            shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)


@contextlib.contextmanager
def simulated_hosts(count: int, loopback_own_name: Sequence[int] = ()) -> Iterator[SimulatedHosts]:
    hosts = SimulatedHosts(count, loopback_own_name)
    try:
        yield hosts
    finally:
        hosts.close()


def wait_all(processes: Sequence[subprocess.Popen], timeout: float) -> list[tuple[str, str, int]]:
    """(stdout, stderr, exit code) of each process; past `timeout` they are killed (code -9)."""
    deadline = time.monotonic() + timeout
    outcomes = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        outcomes.append((out, err, process.returncode))
    return outcomes
