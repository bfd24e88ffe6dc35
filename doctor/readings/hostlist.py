"""SLURM's compressed host lists, expanded as `scontrol show hostnames` does.

`gpu[01-04,07],cpu9` -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu9. A bracket holds numbers and ranges
separated by commas; a range keeps the width of its first number (`[08-10]` -> 08 09 10);
several brackets in one name expand as their product, in order (`r[1-2]n[1-2]` -> r1n1 r1n2
r2n1 r2n2). Commas inside brackets do not separate hosts.
"""

from __future__ import annotations

import itertools
import re

MAX_HOSTS = 100_000  # a guard against a typo such as [1-99999999], applied while expanding
MAX_DIGITS = 12  # a host number longer than this is no host's
RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostListError(ValueError):
    """The text is not a host list SLURM would write."""


def expand_hostlist(text: str) -> list[str]:
    """The limit holds while expanding: each item's count is known before it is built."""
    hosts: list[str] = []
    for item in _split_top_level(text.strip()):
        hosts.extend(_expand_item(item, MAX_HOSTS - len(hosts), text))
    return hosts


def _split_top_level(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostListError(f"nested brackets in host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostListError(f"unbalanced ']' in host list {text!r}")
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth:
        raise HostListError(f"unbalanced '[' in host list {text!r}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str, room: int, text: str) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", item)  # literal, [ranges], literal, ...
    choices = []
    count = 1
    for part in parts:
        choice = _expand_brackets(part, room) if part.startswith("[") else [part]
        count *= len(choice)
        if count > room:
            raise HostListError(f"host list {text[:200]!r} names more than {MAX_HOSTS} hosts")
        choices.append(choice)
    return ["".join(combination) for combination in itertools.product(*choices)]


def _expand_brackets(part: str, room: int) -> list[str]:
    numbers: list[str] = []
    for piece in part[1:-1].split(","):
        match = RANGE.match(piece.strip())
        if not match:
            raise HostListError(
                f"{piece[:40]!r} in {part[:200]!r} is not a number or a range like 01-04"
            )
        low, high = match.group(1), match.group(2) or match.group(1)
        if len(low) > MAX_DIGITS or len(high) > MAX_DIGITS:
            raise HostListError(f"a host number in {part[:200]!r} has over {MAX_DIGITS} digits")
        if int(high) < int(low):
            raise HostListError(f"range {piece!r} in {part!r} runs backwards")
        if int(high) - int(low) >= room - len(numbers):
            raise HostListError(
                f"range {piece!r} in {part[:200]!r} names more than {MAX_HOSTS} hosts"
            )
        width = len(low)
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return numbers
