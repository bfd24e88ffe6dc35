"""Nothing from an input reaches a terminal as a control sequence: the last step of every text
the doctor prints or writes (cli.emit, and its one-line errors).

A log line, a file name, a pickle's global name or a report's fact can carry ESC sequences
(CSI, OSC: a title, a hyperlink, a cleared screen), their one-byte C1 forms, a BEL, a carriage
return that overwrites what was printed, or a bidi override that shows text in another order
than it is. Each becomes a visible escape (`\\x1b`, `\\u202e`); newlines and tabs stay. JSON
keeps its strings equal and gets those characters as `\\u` escapes. The only sequences kept are
the doctor's own colour on a severity title line, which no input can produce whole.
"""

from __future__ import annotations

import re

# C0 but newline and tab, DEL, C1, and the characters that reorder or split displayed text.
_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb"
    "\ud800-\udfff]"  # lone surrogates: undecodable bytes of a file name
)
# What a JSON encoder leaves raw inside strings (it escapes C0 itself).
_RAW_IN_JSON = re.compile(
    "[\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb\ud800-\udfff]"
)
_SGR = r"\x1b\[[0-9;]{0,16}m"
# The table's severity titles as click.style colours them: "ERROR (2)" and no more.
_OWN_TITLE = re.compile(rf"^((?:{_SGR}){{1,4}})([A-Z]{{4,7}} \(\d{{1,9}}\))((?:{_SGR}){{1,4}})$")
JSON_FORMATS = ("json", "sarif")


def visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """Every control or reordering character as a visible escape; newlines and tabs stay."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(lambda m: visible(m.group(0)), text)


def terminal_text(text: str) -> str:
    """escape_controls, keeping the colour of the doctor's own severity titles."""
    if "\x1b" not in text:
        return escape_controls(text)
    lines = []
    for line in text.split("\n"):
        title = _OWN_TITLE.match(line)
        lines.append(line if title else escape_controls(line))
    return "\n".join(lines)


def json_text(text: str) -> str:
    """JSON text with the characters its encoder left raw written as \\u escapes."""
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def inert(text: str, fmt: str) -> str:
    """The last pass for a rendered output in this format."""
    return json_text(text) if fmt in JSON_FORMATS else terminal_text(text)


def shown_path(path: str) -> str:
    """A file name as a terminal line may show it: newlines, controls and undecodable bytes
    (surrogate escapes) written as escapes, so a name cannot start a line of its own."""
    text = path.encode("utf-8", "backslashreplace").decode("utf-8")
    return escape_controls(text).replace("\n", "\\n").replace("\t", "\\t")
