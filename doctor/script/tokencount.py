"""A file's token count as files.py's bound counts it (`\\w+|[^\\w\\s]|\\n`: a name or number,
an operator character, a newline), for ASCII text in C: two translations and three counts,
not one match object per token (the bound is asked of every file over 100,000 characters)."""

from __future__ import annotations

import re

# Each ASCII character classed by the str pattern's own \w and \s (\s holds \x1c-\x1f too).
_ASCII = [chr(code) for code in range(128)]
_WORD_BYTES = bytes(code for code, char in enumerate(_ASCII) if re.match(r"\w", char))
_SPACE_BYTES = bytes(code for code, char in enumerate(_ASCII) if re.match(r"\s", char))
_WORDS_ONLY = bytes(ord("a") if code in _WORD_BYTES else ord(" ") for code in range(256))


def ascii_token_count(text: str) -> int:
    """The number of tokens of an ASCII text (`text.isascii()` must hold)."""
    data = text.encode("ascii")
    operators = len(data.translate(None, _WORD_BYTES + _SPACE_BYTES))
    runs = data.translate(_WORDS_ONLY)  # every name or number a run of "a"
    names = runs.count(b" a") + runs.startswith(b"a")
    return names + operators + data.count(b"\n")
