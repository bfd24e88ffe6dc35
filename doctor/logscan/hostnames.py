"""Host names in a log: the words of a lookup that failed (glibc, musl, c10d, nslookup, an HTTP
client), the name it was for, gloo's own lookups, a pasted hosts entry; and Lookups, which tells
a failed lookup that stopped the run from a harmless or unrelated one. logfacts.py keeps them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# "127.0.0.1       PC103686": a host name the resolver maps to loopback (ray-project/ray#24305)
HOSTS_ENTRY = re.compile(r"^\s*(127\.\d{1,3}\.\d{1,3}\.\d{1,3})\s+([A-Za-z][\w.-]{0,62})\b")
LOCAL_NAMES = ("localhost", "ip6-", "loopback")
UNRESOLVED = (  # glibc, musl/busybox and c10d words for a host name that does not resolve
    "Name or service not known",
    "Name does not resolve",
    "nodename nor servname provided",
    "Temporary failure in name resolution",
    "No address associated with hostname",  # EAI_NODATA: the name has no address records
)
NO_ADDRESS_AT_ALL = "No address associated with hostname"
_UNRESOLVED_HOST = (
    re.compile(r"addresses of \(([^,\s)]+),"),  # c10d: The IPv4 network addresses of (h, 29500)
    re.compile(r"resolve '([^']+)'"),  # nslookup: can't resolve 'master-0'
    re.compile(r"\[([^\]\s]+)\]:\d+"),  # [W socket.cpp] ... [node-7]:29500
)
# An IPv6-only lookup that fails with "no such name/no AAAA record" is harmless (c10d falls back
# to IPv4: localhost without ::1, a Mac's .local name); EAI_AGAIN is the resolver itself failing
# for the name, which the IPv4 lookup meets too.
RESOLVER_FAILED = "Temporary failure in name resolution"
# ... unless a connect to that same name then failed with EINVAL: c10d found no address to try
# (meta-pytorch/monarch#1571: "failed to connect to [job-....internal]:50745 (errno: 22 -
# Invalid argument)" beside the IPv6 "gai error: -2 - Name or service not known")
NO_ADDRESS_CONNECT = re.compile(r"failed to connect to \[([^\]\s]+)\]:\d+ \(errno: 22\b")
HARMLESS_NAMES = ("localhost", "ip6-localhost")


def lookup_failure(body: str, number: int) -> tuple[str | None, str, int] | None:
    error = next((text for text in UNRESOLVED if text in body), None)
    if error is None:
        return None
    hosts = (regex.search(body) for regex in _UNRESOLVED_HOST)
    host = next((m.group(1) for m in hosts if m and m.group(1) != "(null)"), None)
    if host is not None or "host not found" in body or "gaierror" in body:
        return (host, error, number)
    return None


# gloo tcp/device.cc: "[enforce fail at .../device.cc:127] rp != nullptr. Unable to find address
# for: dgx-1.ai" (no address of the host name could be bound: msr-fiddle/pipedream#32) and
# "ifa != nullptr. Unable to find address for: eth1" (no address on the interface named)
_GLOO_NO_ADDRESS = re.compile(r"(?:\b(ifa|rp) != nullptr\.\s*)?Unable to find address for: (\S+)")


def gloo_no_address(body: str, number: int) -> tuple[str | None, str, int] | None:
    """(the enforce condition, ifa or rp, when the line has it; the name; the line)."""
    match = _GLOO_NO_ADDRESS.search(body)
    return (match.group(1), match.group(2)[:200], number) if match else None


# An HTTP client's failed connection (urllib3, requests, httpx under huggingface_hub): a lookup
# it reports is a download's, not the rendezvous master's (huggingface/transformers#12575:
# "HTTPSConnectionPool(host='cdn-lfs.huggingface.co', port=443) ... Failed to establish a new
# connection: [Errno -2] Name or service not known"; urllib3 2.x: NameResolutionError)
HTTP_CLIENT_WORDS = (
    "ConnectionPool(host=",
    "NameResolutionError",
    "NewConnectionError",
    "Failed to establish a new connection",
    "('Connection aborted.'",  # urllib3's ProtocolError around a reset connection
    "Connection to wandb service failed",  # wandb's own service socket (wandb/wandb#7329)
)
_HTTP_HOST = re.compile(r"ConnectionPool\(host='([^']+)'|Failed to resolve '([^']+)'")


def http_lookup(body: str, number: int) -> tuple[str | None, int] | None:
    """(the host the HTTP client connected to, if the line names it; the line)."""
    if not any(words in body for words in HTTP_CLIENT_WORDS):
        return None
    match = _HTTP_HOST.search(body)
    return ((match.group(1) or match.group(2)) if match else None, number)


# the store's client and its master: "failed to connect to [10.200.0.1]:29500", "while trying to
# connect to (node-0, 29500)" (c10d socket.cpp)
_STORE_TARGET = re.compile(r"(?:failed to connect to \[|trying to connect to \()([^\]\s,)]+)")


def remote_store(body: str, number: int) -> tuple[str, int] | None:
    """The store's master as its client named it, when that is no loopback name or address."""
    target = _STORE_TARGET.search(body)
    host = target.group(1).strip("[]") if target else ""
    local = host.startswith("127.") or host in ("::1", *HARMLESS_NAMES)
    return (host, number) if host and not local else None


# c10d's client giving up on the master: SocketConnectOp::tryConnect retries a failed lookup of
# one address family until its connect deadline, then throws this (pytorch/pytorch
# torch/csrc/distributed/c10d/socket.cpp throwTimeoutError)
_GAVE_UP = re.compile(r"timed out after \S+ while trying to connect to \(([^,\s)]+),")


def gave_up_on(body: str) -> str | None:
    """The host c10d's client timed out connecting to, if the line is that timeout."""
    match = _GAVE_UP.search(body)
    return match.group(1) if match else None


MAX_HOSTS = 64


@dataclass
class Lookups:
    """The name lookups a log shows failing, and what tells a harmless one from a fatal one."""

    unresolved: tuple[str | None, str, int] | None = None  # (host, error, line), the first
    ipv6_unresolved: tuple[str | None, str, int] | None = None  # an IPv6-only lookup's
    no_address_hosts: set[str] = field(default_factory=set)  # connects that found no address
    gave_up_hosts: set[str] = field(default_factory=set)  # c10d clients' connect timeouts
    http_hosts: set[str | None] = field(default_factory=set)  # an HTTP client's failed lookups

    def read(self, body: str, number: int) -> None:
        download = http_lookup(body, number) if "onnection" in body else None
        if download is not None and len(self.http_hosts) < MAX_HOSTS:
            self.http_hosts.add(download[0])
        if self.unresolved is None and ("IPv6" not in body or RESOLVER_FAILED in body):
            self.unresolved = lookup_failure(body, number)
        elif self.ipv6_unresolved is None and "IPv6" in body:
            self.ipv6_unresolved = lookup_failure(body, number)
        if "while trying to connect to (" in body and len(self.gave_up_hosts) < MAX_HOSTS:
            self.gave_up_hosts.update(filter(None, [gave_up_on(body)]))
        if "(errno: 22" in body and len(self.no_address_hosts) < MAX_HOSTS:
            self.no_address_hosts.update(NO_ADDRESS_CONNECT.findall(body))

    def unresolvable(self) -> tuple[str | None, str, int] | None:
        """The first name lookup that failed for good: any but an HTTP client's (a download)
        and an IPv6-only one, which counts only for a non-local name when a connect to it then
        found no address at all, or when the lookup found no address records (EAI_NODATA:
        c10d asks with AI_V4MAPPED, so an IPv4 address would have come back mapped) and the
        client then timed out on that name, having retried the lookup until its deadline."""
        if self.unresolved is not None:
            return None if self._a_downloads(self.unresolved[0]) else self.unresolved
        ipv6 = self.ipv6_unresolved
        host = ipv6[0] if ipv6 else None
        if ipv6 is None or host is None or host in HARMLESS_NAMES or host.endswith(".local"):
            return None
        no_records = ipv6[1] == NO_ADDRESS_AT_ALL and host in self.gave_up_hosts
        return ipv6 if host in self.no_address_hosts or no_records else None

    def _a_downloads(self, host: str | None) -> bool:
        """The client named that host, or the lookup names none and a client's lookup failed."""
        return bool(self.http_hosts) and (host is None or host in self.http_hosts)
