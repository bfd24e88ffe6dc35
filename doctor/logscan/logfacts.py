"""What a log tells about the run, as facts: the bootstrap interfaces NCCL chose, variables it
reports as set, versions per host, addresses it connected to (and how that went), host names
that did not resolve. Each fact keeps the line it came from; memory is bounded (a few dozen
values per kind, however long the log).

The scanner hands every line the prefilter let through (FACT_ANCHORS are among its anchors);
factrules.py has the probes' own rules judge what was read.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ddp_doctor.logscan.hostnames import (
    HOSTS_ENTRY,
    HTTP_CLIENT_WORDS,
    LOCAL_NAMES,
    Lookups,
    gloo_no_address,
    remote_store,
)
from ddp_doctor.logscan.rankfacts import RANK_FACT_ANCHORS, RunFacts

MAX_VALUES = 64
UNREACHABLE_CUT = 300  # characters of a "no route" line kept (the live rule's own cut)

# Lines the table's own anchors already pass (connection refused / timed out, NCCL WARN) need
# none here; these are chosen to reuse the prefilter's existing passes (a C or an e in them).
FACT_ANCHORS: tuple[str, ...] = (
    "NCCL INFO Bootstrap",
    "NCCL INFO NET : Using interface",  # NCCL <= 2.3
    "NET/Socket : Using",
    "set by environment to",
    "NCCL version",
    "Retry to connect to",
    "Unable to resolve hostname",
    "is neither AF_INET",
    "returned Connection",
    "remote=[",
    "connectFullMesh failed",
    "(errno: 22 - ",  # a connect that found no address to try (an unresolvable name)
    "local=[127.",  # gloo's own address on a failed mesh: "(rank=8, size=16, local=[127.0.0.1])"
)
# Lines that only tell facts (they are common in NCCL_DEBUG=INFO logs): the scanner reads
# their facts and sends them to the pattern table only when a table anchor may be there too.
FACT_ONLY_ANCHORS: tuple[str, ...] = (
    "cudaDriverVersion",  # NCCL >= 2.14: the driver's CUDA version, e.g. 12040
    "Rendezvous complete for workers",  # torchrun's agent; its result on the lines after it
    "PyTorch version:",  # torch.utils.collect_env, pasted into most issues
    "Nvidia driver version:",
    "CUDA used to build PyTorch:",
    "Network is unreachable",  # no route to the address connected to (the live DDP210's texts)
    "No route to host",
    "getent hosts",  # a pasted `getent hosts $(hostname)`: its answer is on the next lines
    "/etc/hosts",
    *RANK_FACT_ANCHORS,
)

# host:pid:tid [dev] NCCL INFO ... (the NCCL_DEBUG prefix names the host)
_NCCL_PREFIX = re.compile(r"(?:^|\s)([\w.-]+):\d+:\d+ \[\d+\] NCCL ")
_INTERFACE = re.compile(
    r"(?:\[\d+\])?([A-Za-z][\w.-]*):((?:\d{1,3}\.){3}\d{1,3}|[0-9a-fA-F]*:[0-9a-fA-F:]+"
    r"(?:%[\w.-]+)?)<\d+>"
)
_OLD_INTERFACE = re.compile(r"Using interface ([\w.-]+):([\w.:%]+)<\d+>")
_ENV = re.compile(r"\b((?:NCCL|GLOO|TORCH_NCCL|CUDA|TP)_\w+) set by environment to (\S+)")
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_DRIVER_CUDA = re.compile(r"cudaDriverVersion (\d{4,6})\b")
_RESULT_FIELD = re.compile(r"^\s*([a-z_]+)=(\S.*?)\s*$")  # "  master_port=29500"
RESULT_LINES = 12  # restart_count ... global_world_sizes, one a line
HOSTS_LINES = 4  # lines read after a pasted `getent hosts` / `cat /etc/hosts` command
_COLLECT_ENV = (  # torch.utils.collect_env's lines: the environment of the host it ran on
    ("torch", re.compile(r"PyTorch version: (\S+)")),
    ("driver", re.compile(r"Nvidia driver version: (\S+)")),
    ("cuda_build", re.compile(r"CUDA used to build PyTorch: (\S+)")),
)
_CONNECT = (
    re.compile(r"connect \[([^\]]+)\]:(\d+)"),  # gloo: connect [127.0.1.1]:25472
    re.compile(r"Retry to connect to ([\d.]+):(\d+)"),  # paddle's tcp_utils
    re.compile(r"Connect to ([\w.:%-]+)<(\d+)>"),  # NCCL socket.cc
    re.compile(r"remote=\[([^\]]+)\]:(\d+|<port>)"),  # gloo connectFullMesh; a user's <port>
)
_OUTCOMES = (
    ("refused", "Connection refused"),
    ("timed-out", "timed out"),
    ("aborted", "Software caused connection abort"),
    ("unreachable", "Network is unreachable"),
)
_IPV4 = re.compile(r"(?<![\w.])((?:\d{1,3}\.){3}\d{1,3})(?![\w.])")


@dataclass(frozen=True)
class FactsRead:
    """The facts a log gave, each with its line: what `logs -v` shows."""

    lines: Mapping[str, int | str] = field(default_factory=dict)  # "file:line" in a folder


@dataclass(frozen=True)
class Interface:
    name: str
    address: str
    line: int


@dataclass(frozen=True)
class Connection:
    address: str
    port: int
    outcome: str | None  # refused, timed-out, aborted, unreachable, or None (retrying, unknown)
    line: int


@dataclass
class LogFacts:
    interfaces: dict[str, Interface] = field(default_factory=dict)
    env: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (value, line)
    nccl_versions: dict[str, tuple[str, int]] = field(default_factory=dict)  # host -> ...
    nccl_cuda: dict[str, tuple[str, int]] = field(default_factory=dict)  # host -> NCCL's CUDA
    driver_cuda: dict[str, tuple[str, int]] = field(default_factory=dict)  # host -> "12.4"
    nodes: dict[int, tuple[str, int]] = field(default_factory=dict)  # group_rank -> ranks
    world_sizes: dict[str, int] = field(default_factory=dict)  # global world size -> line
    rendezvous: dict[str, tuple[str, int]] = field(default_factory=dict)  # master_addr ...
    following: int = 0  # lines still to read after torchrun's "Rendezvous complete" line
    _result: dict[str, tuple[str, int]] = field(default_factory=dict)  # field -> value, line
    # In a folder the scanner numbers lines across its files: (first number, file) per file
    _files: list[tuple[int, str]] = field(default_factory=list)

    def start_file(self, source: str, lines_before: int) -> None:
        """The next file's lines are numbered from lines_before + 1 (a folder's logs)."""
        self._files.append((lines_before, source))

    def locate(self, number: int, source: str | None) -> tuple[str | None, int]:
        """The file and its own line number for a fact's line number."""
        if not self._files:
            return source, number
        at = bisect.bisect_left(self._files, (number, "")) - 1
        before, name = self._files[max(at, 0)]
        return name, number - before

    environment: dict[str, tuple[str, int]] = field(default_factory=dict)  # collect_env's
    connections: list[Connection] = field(default_factory=list)
    addresses: dict[str, int] = field(default_factory=dict)  # non-loopback IPv4 -> first line
    gloo_loopback_fallback: int | None = None  # the line of gloo's warning
    no_family_address: int | None = None  # NCCL's "neither AF_INET(2) nor AF_INET6(10)"
    connect_failures: int = 0  # NCCL "Call to connect returned ..." retries
    gloo_mesh_failed: int | None = None  # gloo's "connectFullMesh failed", its first line
    gloo_local_loopback: int | None = None  # gloo's own pair address on loopback: its line
    remote_store: tuple[str, int] | None = None  # a routable master the client connected to
    unreachable: tuple[str, int] | None = None  # the first "no route" line (cut), and its number
    hostname_loopback: tuple[str, str, int] | None = None  # (address, name, line) pasted
    _reading_hosts: bool = False  # the lines `following` counts are a hosts lookup's answer
    gloo_no_address: tuple[str | None, str, int] | None = None  # (ifa | rp, name, line)
    lookups: Lookups = field(default_factory=Lookups)  # failed name lookups (hostnames.py)
    run: RunFacts = field(default_factory=RunFacts)  # per rank and node (rankfacts.py)

    def read(self, body: str, number: int, who: str | None = None) -> None:
        """Takes what one line says (called for each line the prefilter passed); `who` is the
        speaker its launcher prefix names ("rank 3", "task 0"), if any."""
        self.run.read(body, number, who, _nccl_host(body) if "NCCL" in body else None)
        if "Using" in body and ("Bootstrap" in body or "NET/Socket" in body or "NET :" in body):
            self._interfaces(body, number)
        if "set by environment to" in body:
            for name, value in _ENV.findall(body):
                self._put(self.env, name, (value, number))
        if "NCCL version" in body:
            self._version(body, number, who)
        if "cudaDriverVersion" in body:
            self._driver(body, number)
        if "Rendezvous complete for workers" in body:
            self.following, self._result, self._reading_hosts = RESULT_LINES, {}, False
        elif ("getent hosts" in body or "/etc/hosts" in body) and not self.following:
            self.following, self._reading_hosts = HOSTS_LINES, True
        if "version:" in body or "build PyTorch:" in body:
            self._collect_env(body, number)
        if "Unable to resolve hostname" in body and self.gloo_loopback_fallback is None:
            self.gloo_loopback_fallback = number
        if "is neither AF_INET" in body and self.no_family_address is None:
            self.no_family_address = number
        self.lookups.read(body, number)
        if "Unable to find address" in body and self.gloo_no_address is None:
            self.gloo_no_address = gloo_no_address(body, number)
        if "returned Connection" in body or "Call to connect" in body:
            self.connect_failures += 1
        if "connectFullMesh failed" in body and self.gloo_mesh_failed is None:
            self.gloo_mesh_failed = number
        if "local=[127." in body and self.gloo_local_loopback is None:
            self.gloo_local_loopback = number
        if "to connect to " in body and self.remote_store is None:
            self.remote_store = remote_store(body, number)
        if self.unreachable is None and ("is unreachable" in body or "No route to" in body):
            self.unreachable = _socket_unreachable(body, number)
        self._connections(body, number)
        for address in _IPV4.findall(body):
            if not address.startswith(("127.", "0.")) and len(self.addresses) < MAX_VALUES:
                self.addresses.setdefault(address, number)

    def _interfaces(self, body: str, number: int) -> None:
        found = _INTERFACE.findall(body) or _OLD_INTERFACE.findall(body)
        for name, address in found:
            self._put(self.interfaces, name, Interface(name, address, number))

    def unresolvable(self) -> tuple[str | None, str, int] | None:
        """The first name lookup that failed for good (hostnames.Lookups)."""
        return self.lookups.unresolvable()

    def _version(self, body: str, number: int, who: str | None) -> None:
        version = _NCCL_VERSION.search(body)
        host = _NCCL_PREFIX.search(body)
        if version and host:  # a version with no host prefix says nothing about which node
            self._put(self.nccl_versions, host.group(1), (version.group(1), number))
            if version.group(2):
                self._put(self.nccl_cuda, host.group(1), (version.group(2), number))
        if version and (who or host):  # who or where is set
            where = host.group(1) if host else None
            self.run.nccl_version(version.group(1), version.group(2), number, who or where, where)

    def _driver(self, body: str, number: int) -> None:
        prefix = _NCCL_PREFIX.search(body)
        driver = _DRIVER_CUDA.search(body)
        if driver and prefix:
            code = int(driver.group(1))  # 12040 is CUDA 12.4
            version = f"{code // 1000}.{code % 1000 // 10}"
            self._put(self.driver_cuda, prefix.group(1), (version, number))

    def read_following(self, body: str, number: int) -> None:
        """One of the lines after torchrun's "Rendezvous complete for workers. Result:", or
        after a pasted hosts lookup."""
        if self._reading_hosts:
            self._hosts_entry(body, number)
            return
        match = _RESULT_FIELD.match(body)
        self.following = self.following - 1 if match else 0
        if match:
            self._result[match.group(1)] = (match.group(2)[:200], number)
        if self.following == 0 or (match and match.group(1) == "global_world_sizes"):
            self.following = 0
            self._take_result()

    def _hosts_entry(self, body: str, number: int) -> None:
        self.following -= 1
        entry = HOSTS_ENTRY.match(body)
        name = entry.group(2) if entry else ""
        if entry and not name.startswith(LOCAL_NAMES) and self.hostname_loopback is None:
            self.hostname_loopback = (entry.group(1), name, number)

    def _take_result(self) -> None:
        result = self._result
        for name in ("master_addr", "master_port", "group_world_size"):
            if name in result:
                self._put(self.rendezvous, name, result[name])
        sizes, line = result.get("global_world_sizes", ("", 0))
        size = sizes.strip("[]").split(",")[0].strip()
        if size:
            self._put(self.world_sizes, size, line)
        node = result.get("group_rank", ("", 0))[0]
        if node.isdigit() and "global_ranks" in result:
            self._put(self.nodes, int(node), result["global_ranks"])

    def _collect_env(self, body: str, number: int) -> None:
        for name, regex in _COLLECT_ENV:
            match = regex.search(body)
            if match:
                self._put(self.environment, name, (match.group(1), number))

    def _connections(self, body: str, number: int) -> None:
        if len(self.connections) >= MAX_VALUES:
            return
        outcome = next((name for name, text in _OUTCOMES if text in body), None)
        for regex in _CONNECT:
            match = regex.search(body)
            if match:
                address, port = match.group(1), match.group(2)
                port = 0 if port == "<port>" else int(port)
                self.connections.append(Connection(address, port, outcome, number))
                return

    @staticmethod
    def _put(table: dict, key: str, value: object) -> None:
        if key in table or len(table) < MAX_VALUES:
            table.setdefault(key, value)

    def worth_judging(self) -> bool:
        """Whether any rule of factrules.py could fire (most logs: no, and nothing loads)."""
        return bool(
            self.run.worth_judging()
            or len(self.world_sizes) > 1
            or self.unresolvable()
            or self.connections
            or len(self.nccl_versions) > 1
            or self.gloo_loopback_fallback is not None
            or self.hostname_loopback is not None
            or self.gloo_no_address is not None
            or (self.no_family_address is not None and "NCCL_SOCKET_IFNAME" in self.env)
            or bool(self.interfaces)  # one virtual interface counts in a multi-node log
            or self.unreachable is not None
        )

    def lines(self) -> dict[str, int | str]:
        """Which fact came from which line (file:line in a folder), for the report (-v)."""
        shown = self._lines()
        if not self._files:
            return dict(shown)
        located = (self.locate(number, None) for number in shown.values())
        return {fact: f"{name}:{line}" for fact, (name, line) in zip(shown, located, strict=True)}

    def _lines(self) -> dict[str, int]:
        shown: dict[str, int] = {}
        for name, interface in self.interfaces.items():
            shown[f"interface {name} {interface.address}"] = interface.line
        for name, (value, line) in self.env.items():
            shown[f"{name}={value}"] = line
        for host, (version, line) in self.nccl_versions.items():
            shown[f"NCCL {version} on {host}"] = line
        for host, (version, line) in self.nccl_cuda.items():
            shown[f"NCCL built for CUDA {version} on {host}"] = line
        for host, (version, line) in self.driver_cuda.items():
            shown[f"driver supports CUDA {version} on {host}"] = line
        for name, (value, line) in self.rendezvous.items():
            shown[f"torchrun rendezvous {name}={value}"] = line
        for size, line in self.world_sizes.items():
            shown[f"world size {size}"] = line
        for node, (ranks, line) in sorted(self.nodes.items())[:8]:
            shown[f"node {node} ran ranks {ranks}"] = line
        if len(self.nodes) > 8:
            shown[f"{len(self.nodes) - 8} more nodes"] = min(n for _, n in self.nodes.values())
        for name, (value, line) in self.environment.items():
            shown[f"{_ENVIRONMENT_NAMES[name]} {value}"] = line
        for connection in self.connections[:8]:
            what = connection.outcome or "tried"
            shown[f"connect {connection.address}:{connection.port} {what}"] = connection.line
        if self.gloo_loopback_fallback is not None:
            shown["gloo fell back to loopback"] = self.gloo_loopback_fallback
        if self.hostname_loopback is not None:
            address, name, line = self.hostname_loopback
            shown[f"host name {name} resolves to {address}"] = line
        if self.gloo_no_address is not None:
            _, name, line = self.gloo_no_address
            shown[f"gloo found no address for {name}"] = line
        if self.unresolvable() is not None:
            host, error, line = self.unresolvable()
            shown[f"{host or 'a host name'} does not resolve ({error})"] = line
        if self.unreachable is not None:
            shown["no route to an address connected to"] = self.unreachable[1]
        if self.remote_store is not None:
            shown[f"the store's client connects to {self.remote_store[0]}"] = self.remote_store[1]
        if self.gloo_local_loopback is not None:
            shown["gloo's own pair address is loopback"] = self.gloo_local_loopback
        return {**shown, **self.run.shown(set(self.nccl_versions))}


def _nccl_host(body: str) -> str | None:
    prefix = _NCCL_PREFIX.search(body)
    return prefix.group(1) if prefix else None


_ENVIRONMENT_NAMES = {
    "torch": "torch",
    "driver": "NVIDIA driver",
    "cuda_build": "torch built for CUDA",
}


def _socket_unreachable(body: str, number: int) -> tuple[str, int] | None:
    """A socket connect with no route (c10d, gloo, NCCL's sockets); an InfiniBand verbs call
    that says "Network is unreachable" (ibv_modify_qp on RoCE) is the fabric's (DDP514)."""
    if "ibv_" in body or "onnect" not in body or any(w in body for w in HTTP_CLIENT_WORDS):
        return None  # an HTTP client's connection (a download) is not the run's
    return body.strip()[:UNREACHABLE_CUT], number
