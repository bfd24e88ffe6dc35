"""One row of the log pattern table, how a row matches a line, and the combined prefilter."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from ddp_doctor.model import Remediation, Severity


class Role(IntEnum):
    """Where a finding goes in the report: causes first, then their symptoms, then notes."""

    CAUSE = 0  # a problem that makes a run fail by itself
    SYMPTOM = 1  # what other ranks see when a cause struck (timeouts, closed peers)
    NOTE = 2  # worth knowing, did not fail the run (warnings, deprecations)
    HINT = 3  # never reported by itself: context that the inference step reads (inference.py)


Evidence = Mapping[str, object]


@dataclass(frozen=True)
class Pattern:
    """A known log text: the stable substrings that identify it and the facts it carries.

    `anchors` are literal, case-sensitive substrings; a line is this pattern's when it contains
    one of them (and `confirm`, if given, also matches) and none of `unless`. `fields` map an
    evidence key to regexes with one group; the first that matches gives the value (digits
    become ints). `accept`, if given, decides on those values (numbers compared, which no
    regex can do). `message` is a template: `{key}` is an evidence value, and a `[...]` part is
    dropped when a key inside it has no value. A HINT row has no code: `name` says what it
    hints at.
    """

    code: str
    name: str  # the code's catalogue name; used only while the code is not registered yet
    anchors: tuple[str, ...]
    message: str
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    confirm: str | None = None
    unless: tuple[str, ...] = ()
    role: Role = Role.CAUSE
    severity: Severity | None = None  # replaces the code's registered severity for this text
    fix: Remediation | None = None  # replaces the code's registered fix for this text
    priority: int = 0  # among hits of one code, the highest priority gives the finding's line
    collect: tuple[str, ...] = ()  # evidence keys whose distinct values are all kept
    role_of: Callable[[Evidence], Role] | None = None  # a role that depends on the evidence
    accept: Callable[[Evidence], bool] | None = None  # the values this row is for
    _field_regexes: Mapping[str, tuple[re.Pattern[str], ...]] = field(
        init=False, repr=False, compare=False
    )
    _confirm_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = {key: tuple(re.compile(rx) for rx in rxs) for key, rxs in self.fields.items()}
        object.__setattr__(self, "_field_regexes", compiled)
        object.__setattr__(
            self, "_confirm_regex", re.compile(self.confirm) if self.confirm else None
        )

    def matches(self, text: str) -> bool:
        if not any(anchor in text for anchor in self.anchors):
            return False
        if any(word in text for word in self.unless):
            return False
        return self._confirm_regex is None or self._confirm_regex.search(text) is not None

    def extract(self, text: str) -> dict[str, object]:
        found: dict[str, object] = {}
        for key, regexes in self._field_regexes.items():
            for regex in regexes:
                match = regex.search(text)
                if match and match.group(1) is not None:
                    found[key] = _typed(match.group(1).strip())
                    break
        return found

    def accepts(self, evidence: Evidence) -> bool:
        return self.accept is None or self.accept(evidence)

    def role_for(self, evidence: Evidence) -> Role:
        return self.role_of(evidence) if self.role_of else self.role


def _typed(value: str) -> object:
    return int(value) if re.fullmatch(r"-?\d{1,18}", value) else value


_OPTIONAL_PART = re.compile(r"\[([^\[\]]*)\]")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def render_message(template: str, evidence: Evidence) -> str:
    """Fills `{key}` from evidence; drops each `[...]` part that names a missing key."""

    def keep_part(match: re.Match[str]) -> str:
        part = match.group(1)
        keys = _PLACEHOLDER.findall(part)
        return part if all(evidence.get(key) not in (None, "") for key in keys) else ""

    filled = _OPTIONAL_PART.sub(keep_part, template)
    return _PLACEHOLDER.sub(lambda m: str(evidence.get(m.group(1), "?")), filled)


# --- The prefilter -------------------------------------------------------------------------
# Every line of a log passes the prefilter; only lines it finds reach the patterns. Python's
# regex engine scans fast (memchr speed) only for a pattern that starts with one literal
# character; an alternation of many anchors costs it ~5 ns per byte. So each anchor is cut to
# a suffix that starts at one of a few chosen characters ("client socket has timed out" becomes
# "ket has timed out"), and the suffixes are grouped by that character: one regex per group
# ("k(?:et has timed out|ernel image...)"), a handful of fast passes over each chunk. A suffix
# is a necessary condition for its anchor, so no line an anchor would find is missed.
_MIN_SUFFIX = 7  # shorter suffixes ("memory") would let common words through
# Rough share of each character in log text (per byte), for choosing what to scan for.
_FREQUENCY_GROUPS = (
    (" ", 0.13),
    ("0123456789", 0.03),
    ("etaoinsr", 0.045),
    ("lcdhu:.=/-_[],mp", 0.02),
    ("()NCIEROASTLgfwyb", 0.007),
    ("PDMUWFGHBVKJXZQYvk", 0.003),
    ("'\"#<>|;%&!?xjqz", 0.001),
)
_PASS_COST = 0.3  # ns per byte for one memchr-like pass over a chunk
_ATTEMPT_COST = 20.0  # ns per position where a pass's first character occurs


def _scan_cost(char: str) -> float:
    """What scanning for `char` costs per byte of log: a pass plus an attempt per occurrence."""
    share = next((share for chars, share in _FREQUENCY_GROUPS if char in chars), 0.01)
    return _PASS_COST + share * _ATTEMPT_COST


def _start_choices(anchor: str) -> dict[str, int]:
    """Each character that can start a long enough suffix, with its first such position."""
    last = max(0, len(anchor) - _MIN_SUFFIX)
    choices: dict[str, int] = {}
    for index, char in enumerate(anchor[: last + 1]):
        choices.setdefault(char, index)
    return choices


def choose_suffixes(anchors: Iterable[str]) -> dict[str, str]:
    """Anchor -> the suffix the prefilter looks for. Greedy weighted set cover: take the
    character with the lowest scan cost per anchor it newly covers, until all are covered."""
    choices = {anchor: _start_choices(anchor) for anchor in set(anchors)}
    suffixes: dict[str, str] = {}
    chosen: set[str] = set()  # a character already scanned for costs nothing more to reuse
    while len(suffixes) < len(choices):
        open_anchors = [a for a in choices if a not in suffixes]
        counts: dict[str, int] = {}
        for anchor in open_anchors:
            for char in choices[anchor]:
                counts[char] = counts.get(char, 0) + 1
        best = min(sorted(counts), key=lambda c: (c not in chosen, _scan_cost(c) / counts[c]))
        chosen.add(best)
        for anchor in open_anchors:
            if best in choices[anchor]:
                suffixes[anchor] = anchor[choices[anchor][best] :]
    return suffixes


class Prefilter:
    """Finds where, in a chunk of bytes, any anchor may occur."""

    def __init__(self, anchors: Iterable[str]) -> None:
        by_first: dict[bytes, list[bytes]] = {}
        for suffix in set(choose_suffixes(anchors).values()):
            encoded = suffix.encode()
            by_first.setdefault(encoded[:1], []).append(encoded[1:])
        self.regexes = tuple(
            re.compile(re.escape(first) + _trie_regex(rests))
            for first, rests in sorted(by_first.items())
        )

    def candidates(self, chunk: bytes, begin: int = 0, end: int | None = None) -> list[int]:
        """Sorted offsets of possible anchors in chunk[begin:end] (a line may hold several)."""
        end = len(chunk) if end is None else end
        found = [m.start() for regex in self.regexes for m in regex.finditer(chunk, begin, end)]
        return sorted(found)


def _trie_regex(words: Iterable[bytes]) -> bytes:
    trie: dict = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(bytes([byte]), {})
        node[b""] = {}  # end of a word: any longer word through here is redundant
    return _trie_node_regex(trie)


def _trie_node_regex(node: dict) -> bytes:
    if b"" in node:
        return b""  # a shorter suffix already ends here, which is enough to be a candidate
    branches = [re.escape(char) + _trie_node_regex(child) for char, child in sorted(node.items())]
    return branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"


def grep_alternation(anchors: Iterable[str]) -> str:
    """The anchors as one `grep -E` pattern: what a grep user would type for the same texts."""
    return "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", a) for a in sorted(set(anchors)))
