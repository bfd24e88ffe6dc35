"""CPU sets as Linux writes them ("0-55,112-167"): compact in a report, easy to compare."""

from __future__ import annotations

from collections.abc import Iterable


def format_cpus(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5'."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def parse_cpus(text: str | None) -> frozenset[int] | None:
    """'0-2,5' -> {0, 1, 2, 5}; None or a malformed list -> None."""
    if text is None:
        return None
    cpus: set[int] = set()
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        return None
    return frozenset(cpus)


def cpus_from_mask_words(words: Iterable[int], bits_per_word: int = 64) -> frozenset[int]:
    """NVML's CPU affinity: an array of 64-bit words, bit i of word j is CPU j*64+i."""
    return frozenset(
        index * bits_per_word + bit
        for index, word in enumerate(words)
        for bit in range(bits_per_word)
        if int(word) >> bit & 1
    )
