"""Takes secrets (and on request host names, addresses, GPU UUIDs) out of shareable output.

Works on the JSON form of a report, so json and markdown output are redacted the same way.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddp_doctor.facts.runs import HOST_NUMBER
from ddp_doctor.trust.secrets import (
    REDACTED,
    is_secret_name,
    redact_secrets,
    redact_url_credentials,
)

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_secrets", "redact_url_credentials"]

IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
# Candidates only (clock times match too); ipaddress decides what really is an address.
IPV6 = re.compile(r"(?<![\w:.])[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?:%\w+)?(?![\w:])")
GPU_UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")


@dataclass
class Redactor:
    home: str | None = None
    user: str | None = None
    hostnames: tuple[str, ...] = ()
    redact_hosts: bool = False
    _aliases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_this_machine(
        cls, redact_hosts: bool = False, hostnames: tuple[str, ...] = ()
    ) -> Redactor:
        import socket  # here: `check` and `logs` redact secrets without ever naming hosts

        names = {socket.gethostname(), *hostnames} - {""}
        return cls(_home(), _user(), tuple(sorted(names, key=len, reverse=True)), redact_hosts)

    def document(self, value: Any, key: str = "") -> Any:
        """A redacted copy of a JSON value; mapping keys that name a secret lose their value."""
        if isinstance(value, dict):
            return {k: self._entry(str(k), v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.document(v, key) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def _entry(self, key: str, value: Any) -> Any:
        if is_secret_name(key) and isinstance(value, (str, int, float)) and value != "":
            return REDACTED
        return self.document(value, key)

    def text(self, text: str) -> str:
        text = redact_secrets(text)
        if self.home and len(self.home) > 1:
            text = re.sub(rf"{re.escape(self.home)}(?![\w.-])", "~", text)
        if self.user and self.user != "root":
            text = re.sub(rf"(?<=[/\\]){re.escape(self.user)}(?=[/\\]|$)", "<user>", text)
        if self.redact_hosts:
            text = self._hosts(text)
        return text

    def _hosts(self, text: str) -> str:
        compact, names = self._host_patterns
        if compact and "[" in text:  # Slurm's compact form of several: gpu-prod-[0001-1024]
            text = compact.sub("<hosts>", text)
        if names:
            text = names.sub("<host>", text)
        text = IPV4.sub(_replace_address("<ip>"), text)
        text = IPV6.sub(_replace_address("<ip6>"), text)
        return GPU_UUID.sub(lambda m: self._alias(m.group(0), m.group(1)), text)

    @functools.cached_property
    def _host_patterns(self) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
        """One pattern for all host names (a cluster report has a thousand), built once."""
        stems = _host_stems(self.hostnames)
        longest_first = sorted(filter(None, self.hostnames), key=len, reverse=True)
        alternatives = "|".join(re.escape(name) for name in longest_first)
        return (
            re.compile(rf"(?<![\w.-])(?:{stems})\[[\d,\s-]*\][\w.-]*") if stems else None,
            re.compile(rf"\b(?:{alternatives})\b") if alternatives else None,
        )

    def _alias(self, uuid: str, kind: str) -> str:
        """The same UUID gets the same stand-in, so a report still shows which is which."""
        if uuid not in self._aliases:
            self._aliases[uuid] = f"{kind}-<uuid{len(self._aliases) + 1}>"
        return self._aliases[uuid]


def _host_stems(hostnames: tuple[str, ...]) -> str:
    """An alternation of the host names less the number a compact host list brackets
    (`gpu-prod-0417` -> `gpu-prod-`; `node12.cluster` -> `node`); names without one give none."""
    stems = set()
    for name in hostnames:
        match = HOST_NUMBER.match(name)  # the number host_list() brackets
        if match and match.group(1):
            stems.add(re.escape(match.group(1)))
    return "|".join(sorted(stems, key=len, reverse=True))


def _replace_address(replacement: str) -> Callable[[re.Match[str]], str]:
    """Replaces a real, non-loopback address; leaves clock times and 127.x/::1/0.0.0.0."""

    import ipaddress

    def replace(match: re.Match[str]) -> str:
        try:
            address = ipaddress.ip_address(match.group(0).split("%")[0])
        except ValueError:
            return match.group(0)
        return match.group(0) if address.is_loopback or address.is_unspecified else replacement

    return replace


def _home() -> str | None:
    home = os.path.expanduser("~")
    return home if home and home != "~" else None


def _user() -> str | None:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (containers with odd uids)
        return None
