"""The C-speed token count of ASCII text agrees with the pattern files.py bounds files by."""

from __future__ import annotations

import random

import pytest

from ddp_doctor.script.files import _TOKEN, MAX_TOKENS, too_many_tokens
from ddp_doctor.script.tokencount import ascii_token_count

EDGES = [
    "",
    "a",
    " a",
    "a ",
    "x=1\n",
    "\n\n\n",
    "foo_bar(baz, 12.5e3)  # c\r\n",
    "\x1c\x1d\x1e\x1fa\x0b\x0cb\x00\x7f",  # \s of a str pattern, beyond space and tab
    "__init__.__dict__[0]",
    "@@@ ;;; ```",
]


@pytest.mark.parametrize("text", EDGES)
def test_count_matches_the_pattern_on_edges(text: str) -> None:
    assert ascii_token_count(text) == len(_TOKEN.findall(text))


def test_count_matches_the_pattern_on_random_ascii() -> None:
    chooser = random.Random(20)
    alphabet = [chr(code) for code in range(128)]
    for _ in range(500):
        text = "".join(chooser.choices(alphabet, k=chooser.randrange(200)))
        assert ascii_token_count(text) == len(_TOKEN.findall(text))


@pytest.mark.parametrize("extra", [0, 1])
def test_bound_is_the_same_for_ascii_and_other_text(extra: int) -> None:
    ascii_text = "x\n" * ((MAX_TOKENS + extra) // 2) + "x" * ((MAX_TOKENS + extra) % 2)
    other = ascii_text + "é"  # one more token, and no longer ASCII
    assert len(_TOKEN.findall(ascii_text)) == MAX_TOKENS + extra
    assert too_many_tokens(ascii_text) is bool(extra)
    assert too_many_tokens(other) is True
