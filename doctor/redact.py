"""Takes secrets (and on request host names, addresses, GPU UUIDs) out of shareable output.

Works on the JSON form of a report, so json and markdown output are redacted the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# KEY names a secret only as the last word of a name (API_KEY, my_private_key, apiKey) or before
# ID (AWS_ACCESS_KEY_ID): a bare "key" (a dict key, "for key: store_based_barrier_key:1"), a
# size or prefix (key_size) or a store key (store_based_barrier_key) is not one.
_NOT_SECRET_KEYS = {"BARRIER", "STORE", "SORT", "DICT", "CACHE", "LOOKUP", "HASH", "PRIMARY"}
_KEY_COMPOUNDS = ("APIKEY", "PRIVATEKEY", "ACCESSKEY", "SECRETKEY")
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
REDACTED = "<redacted>"
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
# Candidates only (clock times match too); ipaddress decides what really is an address.
IPV6 = re.compile(r"(?<![\w:.])[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?:%\w+)?(?![\w:])")
# NAME=value and NAME: value; a command-line flag and its value; HTTP credentials.
SECRET_PAIR = re.compile(r"(?<![\w-])([A-Za-z_][\w-]*)(=|:[ \t]*)(?!<redacted>)([^\s,;]+)")
SECRET_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)([ \t]+|=)(?!<redacted>)(?!-)([^\s,;]+)")
CREDENTIAL_SCHEME = re.compile(r"\b(Bearer|Basic)[ \t]+(?!<redacted>)[\w.~+/=-]+", re.IGNORECASE)
GPU_UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
# scheme://USERINFO@host: the userinfo runs to the last "@" before the path (a password may
# hold a raw "@"); "user:secret" keeps the user, a lone token (https://TOKEN@host) goes whole.
# The scheme is bounded and the userinfo stops at "/", so the scan stays linear on any text.
URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31}://)([^\s/?#]+)@")
TOKEN_LIKE = re.compile(r"(?=.*\d)(?=.*[A-Za-z])[\w.~+=-]{16,}")  # a lone userinfo that is a key


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS) or _names_a_key(name)


def _names_a_key(name: str) -> bool:
    words = [word.upper() for word in _NAME_WORDS.findall(name)]
    if words == ["KEY"]:
        return False  # a bare "key": a dict key, a store key
    for index, word in enumerate(words):
        compound = word.endswith(_KEY_COMPOUNDS)
        if word != "KEY" and not compound:
            continue
        at_end = index == len(words) - 1 or words[index + 1] == "ID"
        if at_end and (compound or index == 0 or words[index - 1] not in _NOT_SECRET_KEYS):
            return True
    return False


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
        text = redact_url_credentials(text)
        text = self._secret_assignments(text)
        if self.home and len(self.home) > 1:
            text = re.sub(rf"{re.escape(self.home)}(?![\w.-])", "~", text)
        if self.user and self.user != "root":
            text = re.sub(rf"(?<=[/\\]){re.escape(self.user)}(?=[/\\]|$)", "<user>", text)
        if self.redact_hosts:
            text = self._hosts(text)
        return text

    @staticmethod
    def _secret_assignments(text: str) -> str:
        """Secrets inside free text (a log line, a command): NAME=value and NAME: value where
        NAME looks secret, --secret-flag value, and HTTP Bearer/Basic credentials."""
        text = CREDENTIAL_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        for pattern in (SECRET_FLAG, SECRET_PAIR):
            text = pattern.sub(_redact_if_secret, text)
        return text

    def _hosts(self, text: str) -> str:
        for name in self.hostnames:
            text = re.sub(rf"\b{re.escape(name)}\b", "<host>", text)
        text = IPV4.sub(_replace_address("<ip>"), text)
        text = IPV6.sub(_replace_address("<ip6>"), text)
        return GPU_UUID.sub(lambda m: self._alias(m.group(0), m.group(1)), text)

    def _alias(self, uuid: str, kind: str) -> str:
        """The same UUID gets the same stand-in, so a report still shows which is which."""
        if uuid not in self._aliases:
            self._aliases[uuid] = f"{kind}-<uuid{len(self._aliases) + 1}>"
        return self._aliases[uuid]


def redact_url_credentials(text: str) -> str:
    """`scheme://user:secret@host` -> `scheme://user:<redacted>@host`, anywhere in a text;
    `https://TOKEN@host` loses the token. A plain user name (ssh://git@host) stays."""
    if "://" not in text:
        return text
    return URL_USERINFO.sub(_redact_userinfo, text)


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    user, colon, _ = userinfo.partition(":")
    if colon:
        return f"{scheme}{user}:{REDACTED}@"
    if TOKEN_LIKE.fullmatch(userinfo):
        return f"{scheme}{REDACTED}@"
    return match.group(0)


def _redact_if_secret(match: re.Match[str]) -> str:
    name, separator = match.group(1), match.group(2)
    return name + separator + REDACTED if is_secret_name(name) else match.group(0)


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
