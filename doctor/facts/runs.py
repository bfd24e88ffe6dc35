"""Compact spellings of long sequences, so a report of 1,024 nodes grows with what differs:
number ranges ("0-7,9"), Slurm-style host lists ("node[0001-1023,1025]"), and columns of
per-rank values that follow a pattern (one value, a stride, a cycle per node)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

HOST_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$")
MAX_EXPANDED = 1 << 20  # a range text never stands for more numbers than this


class RunsError(ValueError):
    """A compact spelling that does not decode (a hand-edited or foreign report)."""


def number_ranges(numbers: Iterable[int]) -> str:
    """0,1,2,3,5 -> "0-3,5" (sorted, duplicates dropped)."""
    ordered = sorted(set(numbers))
    parts: list[str] = []
    start = previous = None
    for number in ordered:
        if previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            parts.append(_span(start, previous))
        start = previous = number
    if start is not None:
        parts.append(_span(start, previous))
    return ",".join(parts)


def _span(start: int, end: int | None) -> str:
    return str(start) if end is None or end == start else f"{start}-{end}"


def parse_ranges(text: str, limit: int = MAX_EXPANDED) -> list[int]:
    numbers: list[int] = []
    for part in filter(None, str(text).split(",")):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise RunsError(f"not a number range: {part!r}")
        first, last = int(low), int(high or low)
        if last < first or len(numbers) + last - first + 1 > limit:
            raise RunsError(f"range {part!r} out of bounds")
        numbers.extend(range(first, last + 1))
    return numbers


def host_list(hosts: Sequence[str]) -> str:
    """Host names in Slurm's compact form, in the order given where numbers run on:
    node0001..node0003, node0007 -> "node[0001-0003,0007]"; node17, node203 -> "node[17,203]";
    other names verbatim."""
    groups: list[tuple[str, str, int, list[int]] | str] = []
    for host in hosts:
        match = HOST_NUMBER.match(host)
        if match is None:
            groups.append(host)
            continue
        prefix, digits, suffix = match.groups()
        last = groups[-1] if groups else None
        if isinstance(last, tuple) and last[:2] == (prefix, suffix) and _fits(digits, last[2]):
            last[3].append(int(digits))
        else:
            padded = len(digits) > 1 and digits.startswith("0")
            groups.append((prefix, suffix, len(digits) if padded else 0, [int(digits)]))
    return ",".join(_host_group(group) for group in groups)


def _fits(digits: str, width: int) -> bool:
    """Whether a number belongs to a group of that zero-padded width (0: not padded)."""
    if width:
        return len(digits) == width
    return digits == "0" or not digits.startswith("0")


def _host_group(group: tuple[str, str, int, list[int]] | str) -> str:
    if isinstance(group, str):
        return group
    prefix, suffix, width, numbers = group
    if len(numbers) == 1:
        return f"{prefix}{numbers[0]:0{width}d}{suffix}"
    spans, start, previous = [], numbers[0], numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        spans.append(
            f"{start:0{width}d}" if start == previous else f"{start:0{width}d}-{previous:0{width}d}"
        )
        if number is not None:
            start = previous = number
    return f"{prefix}[{','.join(spans)}]{suffix}"


def expand_host_list(text: str, limit: int = MAX_EXPANDED) -> list[str]:
    hosts: list[str] = []
    for item in _top_level_items(str(text)):
        if "[" not in item:
            hosts.append(item)
            continue
        prefix, _, rest = item.partition("[")
        inside, _, suffix = rest.partition("]")
        for span in inside.split(","):
            low, _, high = span.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise RunsError(f"not a host list: {item!r}")
            first, last = int(low), int(high or low)
            if last < first or len(hosts) + last - first + 1 > limit:
                raise RunsError(f"host list {item!r} out of bounds")
            width = len(low) if len(low) > 1 and low.startswith("0") else 0
            hosts.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(first, last + 1))
    return hosts


def _top_level_items(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if current:
        items.append("".join(current))
    return [item for item in items if item]


def encode_column(values: Sequence[Any]) -> Any:
    """A column of per-item values, spelled by its pattern: {"all": v} (one value),
    {"stride": [start, step, repeat]} (start + step * (i // repeat)), {"cycle": [...]}
    (values[i % k]), {"hosts": "node[0-9]", "repeat": r} (each host r times), else the list."""
    items = list(values)
    if not items:
        return []
    if all(v == items[0] for v in items):
        return {"all": items[0]}
    stride = _stride(items)
    if stride is not None:
        return {"stride": stride}
    cycle = _cycle(items)
    if cycle is not None:
        return {"cycle": cycle}
    strides = _strides(items)
    if strides is not None and len(strides) * 8 < len(items):
        return {"strides": strides}
    if all(isinstance(v, str) for v in items):
        return _hosts_column(items)
    return items


def decode_column(spelled: Any, count: int) -> list[Any]:
    if isinstance(spelled, list):
        if len(spelled) != count:
            raise RunsError(f"a column of {len(spelled)} values for {count} items")
        return spelled
    if not isinstance(spelled, dict) or len(spelled) not in (1, 2):
        raise RunsError("not a column")
    if "all" in spelled:
        return [spelled["all"]] * count
    if "stride" in spelled:
        start, step, repeat = _ints(spelled["stride"], 3)
        return [start + step * (i // max(1, repeat)) for i in range(count)]
    if "strides" in spelled and isinstance(spelled["strides"], list):
        values: list[Any] = []
        for segment in spelled["strides"]:
            start, step, repeat, length = _ints(segment, 4)
            if length < 0 or len(values) + length > count:
                raise RunsError("a stride segment out of bounds")
            values += [start + step * (i // max(1, repeat)) for i in range(length)]
        if len(values) != count:
            raise RunsError(f"stride segments of {len(values)} for {count} items")
        return values
    if "cycle" in spelled and isinstance(spelled["cycle"], list) and spelled["cycle"]:
        cycle = spelled["cycle"]
        return [cycle[i % len(cycle)] for i in range(count)]
    if "hosts" in spelled:
        repeat = max(1, _ints([spelled.get("repeat", 1)], 1)[0])
        hosts = expand_host_list(spelled["hosts"], limit=count)
        expanded = [host for host in hosts for _ in range(repeat)]
        if len(expanded) != count:
            raise RunsError(f"a host column of {len(expanded)} for {count} items")
        return expanded
    raise RunsError("not a column")


def _ints(values: Any, count: int) -> list[int]:
    if not isinstance(values, list) or len(values) != count:
        raise RunsError("not a column")
    if not all(type(v) is int for v in values):
        raise RunsError("not a column")
    return values


def _stride(items: list[Any]) -> list[int] | None:
    if not all(type(v) is int for v in items):
        return None
    repeat = 1
    while repeat < len(items) and items[repeat] == items[0]:
        repeat += 1
    step = items[repeat] - items[0] if repeat < len(items) else 0
    guess = [items[0] + step * (i // repeat) for i in range(len(items))]
    return [items[0], step, repeat] if guess == items else None


def _strides(items: list[Any]) -> list[list[int]] | None:
    """Integers as segments [start, step, repeat, length], each a stride (a node left out of
    a run of node ranks splits it in two)."""
    if not all(type(v) is int for v in items):
        return None
    segments, index = [], 0
    while index < len(items):
        start, repeat = items[index], 1
        while index + repeat < len(items) and items[index + repeat] == start:
            repeat += 1
        step = items[index + repeat] - start if index + repeat < len(items) else 0
        length = repeat
        while index + length < len(items) and items[index + length] == start + step * (
            length // repeat
        ):
            length += 1
        length -= length % repeat if index + length < len(items) else 0
        length = max(length, repeat)
        segments.append([start, step, repeat, length])
        index += length
    return segments


def _cycle(items: list[Any]) -> list[Any] | None:
    for period in range(2, min(64, len(items) // 2) + 1):
        if len(items) % period == 0 and all(
            items[i] == items[i % period] for i in range(len(items))
        ):
            return items[:period]
    return None


def _hosts_column(items: list[str]) -> Any:
    repeat = 1
    while repeat < len(items) and items[repeat] == items[0]:
        repeat += 1
    if len(items) % repeat == 0:
        distinct = items[::repeat]
        if [h for h in distinct for _ in range(repeat)] == items:
            spelled = host_list(distinct)
            if expand_host_list(spelled, limit=len(distinct)) == distinct:
                return {"hosts": spelled, "repeat": repeat}
    return items
