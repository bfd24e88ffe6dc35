"""SLURM's compressed host lists, expanded as `scontrol show hostnames` does.

`gpu[01-04,07],cpu9` -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu9. A bracket holds numbers and ranges
separated by commas; a range keeps the width of its first number (`[08-10]` -> 08 09 10);
several brackets in one name expand as their product, in order (`r[1-2]n[1-2]` -> r1n1 r1n2
r2n1 r2n2). Commas inside brackets do not separate hosts.
"""

from __future__ import annotations

import itertools
import re

MAX_HOSTS = 100_000  # a guard against a typo such as [1-99999999]
RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostListError(ValueError):
    """The text is not a host list SLURM would write."""


def expand_hostlist(text: str) -> list[str]:
    hosts: list[str] = []
    for item in _split_top_level(text.strip()):
        hosts.extend(_expand_item(item))
        if len(hosts) > MAX_HOSTS:
            raise HostListError(f"host list {text!r} names more than {MAX_HOSTS} hosts")
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


def _expand_item(item: str) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", item)  # literal, [ranges], literal, ...
    choices = [_expand_brackets(part) if part.startswith("[") else [part] for part in parts]
    return ["".join(combination) for combination in itertools.product(*choices)]


def _expand_brackets(part: str) -> list[str]:
    numbers: list[str] = []
    for piece in part[1:-1].split(","):
        match = RANGE.match(piece.strip())
        if not match:
            raise HostListError(f"{piece!r} in {part!r} is not a number or a range like 01-04")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise HostListError(f"range {piece!r} in {part!r} runs backwards")
        if int(high) - int(low) > MAX_HOSTS:
            raise HostListError(f"range {piece!r} in {part!r} is too long")
        width = len(low)
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return numbers
