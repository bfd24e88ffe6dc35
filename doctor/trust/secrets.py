"""Secrets in any text, by their name or by their shape: the one pass every rendered output
goes through (redact.py applies it to the fields of a report too).

By name: a name that has a secret's word in it (token, secret, password, passwd, pwd, pass,
key, credential, auth, cookie, sid, private, signature; any case, as a word of the name with
any other words around it: DB_PASS, MYSQL_PWD, OPENAI_API_KEY_2, apiKey) loses its value in
`NAME=value`, `NAME = value`, `NAME: value`, `--name value`, dict and JSON forms (quoted,
also inside JSON text where the quotes are escaped), and HTTP headers with their scheme
(`Authorization: token ghp_...`). By shape, whatever the name: JWTs, AWS access key ids,
GitHub, Hugging Face, OpenAI, Slack and GitLab tokens, PEM private keys, and long
high-entropy values in assignments. The variables the report exists for (NCCL_*, TORCH_*,
GLOO_*, CUDA_*, MASTER_*, SLURM_*, RANK ...) keep their values unless the value itself has a
secret's shape: hiding them would hide the diagnosis.

Every pattern is linear on any text: bounded repetitions, no nested quantifiers.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter

REDACTED = "<redacted>"
# Words that make a name secret wherever they stand in it (also inside a longer word, as
# before: AUTHTOKEN, MYPASSWORD); the short ones only as whole words (SID, not INSIDE).
_INSIDE_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "APIKEY")
_WHOLE_WORDS = {"PWD", "PASS", "KEY", "COOKIE", "SID", "PRIVATE", "SIGNATURE", "PRIVATEKEY"}
# KEY is no secret as a store's or a dict's key, or as a size: `for key: store_based_barrier_key`
_NOT_SECRET_BEFORE_KEY = {"BARRIER", "STORE", "SORT", "DICT", "CACHE", "LOOKUP", "HASH", "PRIMARY"}
_NOT_SECRET_AFTER_KEY = {
    "SIZE", "SIZES", "LEN", "LENGTH", "COUNT", "TYPE", "BITS", "INDEX", "ERROR", "EXCEPTION",
}  # fmt: skip
# The variables a report exists for: secret only by their value's shape.
_DIAGNOSTIC_PREFIXES = (
    "NCCL_", "TORCH_", "GLOO_", "CUDA_", "MASTER_", "SLURM_", "PET_", "TORCHELASTIC_", "OMP_",
    "NVIDIA_", "UCX_", "FI_", "KMP_", "MKL_", "HIP_", "ROCR_", "HSA_", "PYTORCH_",
)  # fmt: skip
_DIAGNOSTIC_NAMES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"}
_NAME_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")

# A value: quoted (also with JSON's escaped quotes), or a run of characters that ends at
# space, a separator, a quote or a backslash (so JSON text stays valid when it goes).
_VALUE = (
    r"""(?:\\"[^"\\\n]{0,4096}\\"|"[^"\\\n]{0,4096}"|'[^'\\\n]{0,4096}'|[^\s,;"'\\<>]{1,4096})"""
)
_SCHEME = r"(?:(?i:Bearer|Basic|Token|Digest|Negotiate|ApiKey|Key|SSWS)[ \t]+)?"
# NAME=value, NAME = value, NAME: value; the name maybe quoted ("password": "x").
_PAIR = re.compile(
    r"""(?<![\w.-])(?P<open>\\?["']?)(?P<name>[A-Za-z0-9_][\w.-]{0,127}+)(?P=open)"""
    r"""(?P<sep>[ \t]{0,8}(?::=|=|:)[ \t]{0,8})(?!<redacted>|&lt;redacted&gt;)"""
    rf"(?=(?P<value>{_SCHEME}{_VALUE}))"
)
# --name value and --name=value on a command line.
_FLAG = re.compile(
    r"(?<![\w-])(?P<name>--?[A-Za-z0-9][\w-]{0,127}+)(?P<sep>[ \t]{1,8}|=)(?!<redacted>|&lt;redacted&gt;)(?!-)"
    rf"(?=(?P<value>{_VALUE}))"
)
_COOKIE = re.compile(
    r"\b((?:Set-)?Cookie:[ \t]{0,8})(?!<redacted>|&lt;redacted&gt;)[^\n\"\\]{1,8192}", re.IGNORECASE
)
_BARE_SCHEME = re.compile(
    r"\b(Bearer|Basic)[ \t]+(?!<redacted>|&lt;redacted&gt;)[\w.~+/=-]{1,4096}", re.IGNORECASE
)
# A password with a raw "/" (not valid in a URL, still written): user, colon, to the first "@".
_URL_PASSWORD = re.compile(
    r"\b([A-Za-z][A-Za-z0-9+.-]{0,31}+://[^\s/?#@:\"<>\\]{1,256}:)(?!<redacted>|&lt;redacted&gt;)[^\s@\"<>\\]{1,256}@"
)
URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{0,31}+://)([^\s/?#\"<>\\]{1,2048})@")
_TOKEN_LIKE = re.compile(r"(?=.*\d)(?=.*[A-Za-z])[\w.~+=-]{16,}")
_SHAPES = re.compile(
    "|".join(
        (
            r"\beyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{4,8192}\.[A-Za-z0-9_-]{0,4096}",  # JWT
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}\b",  # AWS key id
            r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b",  # GitHub
            r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b",
            r"\bhf_[A-Za-z0-9]{20,255}\b",  # Hugging Face
            r"\bsk-(?:proj-|ant-|svcacct-)?[A-Za-z0-9_-]{20,255}",  # OpenAI, Anthropic
            r"\bxox[abposr]-[A-Za-z0-9-]{10,255}",  # Slack
            r"\bglpat-[A-Za-z0-9_-]{20,255}",  # GitLab
        )
    )
)
_PEM = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]{0,40}PRIVATE KEY)-----"
    r"(?:.{0,16384}?-----END (?P=kind)-----|[^\n\"]{0,16384})",
    re.DOTALL,
)
_HIGH_ENTROPY = re.compile(r"[A-Za-z0-9+/=_-]{32,4096}")


@functools.lru_cache(maxsize=4096)  # a log repeats its names on every line
def is_secret_name(name: str) -> bool:
    """Whether a variable, key or flag name means its value is a secret."""
    bare = name.lstrip("-").strip("\"'\\")
    upper = bare.upper().replace("-", "_")
    if upper in _DIAGNOSTIC_NAMES or upper.startswith(_DIAGNOSTIC_PREFIXES):
        return False
    words = [word.upper() for word in _NAME_WORDS.findall(bare)]
    squashed = "".join(words)
    if any(word in squashed for word in _INSIDE_WORDS):
        return True
    return any(_secret_word(words, index) for index in range(len(words)))


def _secret_word(words: list[str], index: int) -> bool:
    word = words[index]
    if word not in _WHOLE_WORDS:
        return False
    if word != "KEY":
        return True
    if len(words) == 1:
        return False  # a bare "key": a dict's, a store's
    before = words[index - 1] if index else ""
    after = words[index + 1] if index + 1 < len(words) else ""
    return before not in _NOT_SECRET_BEFORE_KEY and after not in _NOT_SECRET_AFTER_KEY


def redact_secrets(text: str) -> str:
    """The text with every secret this module knows replaced by <redacted>."""
    if not text:
        return text
    lowered = text.lower()  # cheap guards: most texts hold no PEM block, cookie or scheme
    if "private key-----" in lowered:
        text = _PEM.sub(lambda m: f"-----BEGIN {m.group('kind')}----- {REDACTED}", text)
    text = redact_url_credentials(text)
    text = _SHAPES.sub(REDACTED, text)
    if "bearer" in lowered or "basic" in lowered:
        text = _BARE_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    if "cookie" in lowered:
        text = _COOKIE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    text = _named_values(_FLAG, text, secret_only=True)
    return _named_values(_PAIR, text, secret_only=False)


def _named_values(pattern: re.Pattern[str], text: str, secret_only: bool) -> str:
    """Replaces the value after each secret NAME. The pattern matches the name and separator
    only (the value is a look-ahead), so a value that is not replaced is searched for names
    too: `ERROR: PASSWORD=x` finds PASSWORD after ERROR."""
    parts: list[str] = []
    cursor = 0
    for match in pattern.finditer(text):
        if match.start() < cursor:
            continue  # inside a value already replaced
        value = match.group("value")
        secret = is_secret_name(match.group("name"))
        if not secret and (secret_only or not _looks_random(_unquoted(value))):
            continue
        parts.append(text[cursor : match.end()])
        parts.append(_replacement(value))
        cursor = match.end() + len(value)
    parts.append(text[cursor:])
    return "".join(parts)


def redact_url_credentials(text: str) -> str:
    """`scheme://user:secret@host` -> `scheme://user:<redacted>@host`; `https://TOKEN@host`
    loses the token; a plain user name (ssh://git@host) stays."""
    if "://" not in text:
        return text
    text = URL_USERINFO.sub(_redact_userinfo, text)
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def _redact_userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    user, colon, _ = userinfo.partition(":")
    if colon:
        return f"{scheme}{user}:{REDACTED}@"
    if _TOKEN_LIKE.fullmatch(userinfo) or _mixed(userinfo):
        return f"{scheme}{REDACTED}@"
    return match.group(0)


def _mixed(userinfo: str) -> bool:
    """A lone user-info of 8+ characters mixing upper case, lower case and digits is a token,
    not a user name (git, ubuntu, alice2)."""
    return len(userinfo) >= 8 and all(
        any(test(c) for c in userinfo) for test in (str.isupper, str.islower, str.isdigit)
    )


def _replacement(value: str) -> str:
    """<redacted>, inside the value's own quotes where it had them (JSON stays JSON)."""
    for quote in ('\\"', '"', "'"):
        if value.startswith(quote) and value.endswith(quote) and len(value) >= 2 * len(quote):
            return f"{quote}{REDACTED}{quote}"
    return REDACTED


def _unquoted(value: str) -> str:
    return value.strip("\\\"'")


def _looks_random(value: str) -> bool:
    """A long value with the entropy of a key (AWS secret keys, API keys under any name); hex
    (hashes, UUIDs), paths and versions are not."""
    if len(value) < 32 or not _HIGH_ENTROPY.fullmatch(value):
        return False
    if re.fullmatch(r"[0-9a-fA-F-]+", value):
        return False
    kinds = sum(
        1 for test in (str.isupper, str.islower, str.isdigit) if any(test(c) for c in value)
    )
    if kinds < 3:
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 4.0
