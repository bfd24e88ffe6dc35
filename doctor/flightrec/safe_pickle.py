"""Reads a pickle as plain data without running it: never pickle.load.

A flight-recorder dump is a pickle of dicts, lists, tuples, strings and numbers, but a pickle
is a program: GLOBAL and REDUCE import and call anything. This reads the opcodes one by one
(pickletools.genops only parses them) and builds containers and scalars itself; any opcode that
would import, call or build an object stops the read. The one exception is TorchScript's list
builders (torch.jit._pickle.build_intlist and its siblings), which only wrap a list; they are
recognised by name and never imported.
"""

from __future__ import annotations

import pickletools
from collections.abc import Callable

MAX_DEPTH = 64  # nesting of containers; a dump nests five or six deep


class UnsafePickle(ValueError):
    """The pickle asks to import, call or build something that is not plain data."""


class BadPickle(ValueError):
    """The bytes are not a complete pickle (truncated, corrupt, not a pickle at all)."""


_MARK = object()
_LIST_BUILDERS = {
    ("torch.jit._pickle", name)
    for name in ("build_intlist", "build_doublelist", "build_boollist", "build_strlist")
}
_LIST_BUILDER = object()  # stands for one of those on the stack until REDUCE applies it
_SCALARS = {
    "NONE": lambda arg: None,
    "NEWTRUE": lambda arg: True,
    "NEWFALSE": lambda arg: False,
    "EMPTY_LIST": lambda arg: [],
    "EMPTY_DICT": lambda arg: {},
    "EMPTY_TUPLE": lambda arg: (),
    "EMPTY_SET": lambda arg: set(),
}
_VALUE_OPS = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
}  # fmt: skip
_IGNORED = {"PROTO", "FRAME", "STOP"}


def load_plain(data: bytes) -> object:
    """The value a pickle of plain data describes; raises UnsafePickle or BadPickle."""
    reader = _Reader()
    try:
        for opcode, arg, position in pickletools.genops(data):
            reader.step(opcode.name, arg, position)
    except (UnsafePickle, BadPickle):
        raise
    except ValueError as error:  # genops: truncated, or a malformed argument
        raise BadPickle(f"not a complete pickle ({error})") from None
    except (IndexError, KeyError, TypeError, OverflowError):  # an unknown opcode, a bad memo
        raise BadPickle("not a pickle of plain data (corrupt, or not a pickle)") from None
    return reader.result()


class _Reader:
    def __init__(self) -> None:
        self.stack: list[object] = []
        self.marks: list[int] = []
        self.memo: dict[int, object] = {}
        self.handlers: dict[str, Callable[[object], None]] = {
            "MARK": lambda arg: self.marks.append(len(self.stack)),
            "POP": lambda arg: self.stack.pop(),
            "POP_MARK": lambda arg: self._take_marked(),
            "DUP": lambda arg: self.stack.append(self.stack[-1]),
            "APPEND": lambda arg: self._list_at(-2).append(self.stack.pop()),
            "APPENDS": lambda arg: self._extend(),
            "LIST": lambda arg: self.stack.append(self._take_marked()),
            "TUPLE": lambda arg: self.stack.append(tuple(self._take_marked())),
            "TUPLE1": lambda arg: self._tuple(1),
            "TUPLE2": lambda arg: self._tuple(2),
            "TUPLE3": lambda arg: self._tuple(3),
            "DICT": lambda arg: self.stack.append(_pairs(self._take_marked(), {})),
            "SETITEM": lambda arg: self._setitems(2),
            "SETITEMS": lambda arg: self._setitems(None),
            "ADDITEMS": lambda arg: self._additems(),
            "FROZENSET": lambda arg: self.stack.append(frozenset(self._take_marked())),
            "PUT": lambda arg: self._put(int(arg)),  # type: ignore[call-overload]
            "BINPUT": lambda arg: self._put(arg),
            "LONG_BINPUT": lambda arg: self._put(arg),
            "MEMOIZE": lambda arg: self._put(len(self.memo)),
            "GET": lambda arg: self.stack.append(self.memo[int(arg)]),  # type: ignore[call-overload]
            "BINGET": lambda arg: self.stack.append(self.memo[arg]),  # type: ignore[index]
            "LONG_BINGET": lambda arg: self.stack.append(self.memo[arg]),  # type: ignore[index]
            "GLOBAL": lambda arg: self._global(str(arg).split(" ", 1)),
            "REDUCE": lambda arg: self._reduce(),
        }

    def step(self, name: str, arg: object, position: int) -> None:
        if name in _IGNORED:
            return
        if name in _VALUE_OPS:
            self.stack.append(arg)
        elif name in _SCALARS:
            self.stack.append(_SCALARS[name](arg))
        elif name in self.handlers:
            self.handlers[name](arg)
        else:
            raise UnsafePickle(f"opcode {name} at byte {position} builds objects, not data")
        if len(self.marks) > MAX_DEPTH:
            raise BadPickle(f"nested deeper than {MAX_DEPTH} levels")

    def result(self) -> object:
        if len(self.stack) != 1 or self.marks:
            raise BadPickle("the pickle does not leave exactly one value")
        return self.stack[0]

    def _take_marked(self) -> list[object]:
        start = self.marks.pop()
        items, self.stack[start:] = self.stack[start:], []
        return items

    def _list_at(self, index: int) -> list[object]:
        target = self.stack[index]
        if not isinstance(target, list):
            raise BadPickle("APPEND to something that is not a list")
        return target

    def _extend(self) -> None:
        items = self._take_marked()
        self._list_at(-1).extend(items)

    def _tuple(self, size: int) -> None:
        items, self.stack[-size:] = self.stack[-size:], []
        self.stack.append(tuple(items))

    def _setitems(self, count: int | None) -> None:
        if count is None:
            items = self._take_marked()
        else:
            items, self.stack[-count:] = self.stack[-count:], []
        target = self.stack[-1]
        if not isinstance(target, dict):
            raise BadPickle("SETITEM on something that is not a dict")
        _pairs(items, target)

    def _additems(self) -> None:
        items = self._take_marked()
        target = self.stack[-1]
        if not isinstance(target, set):
            raise BadPickle("ADDITEMS on something that is not a set")
        target.update(items)

    def _put(self, index: object) -> None:
        if not isinstance(index, int):
            raise BadPickle("a memo index that is not a number")
        self.memo[index] = self.stack[-1]

    def _global(self, parts: list[str]) -> None:
        if tuple(parts) not in _LIST_BUILDERS:
            raise UnsafePickle(f"the pickle imports {'.'.join(parts)}")
        self.stack.append(_LIST_BUILDER)

    def _reduce(self) -> None:
        args = self.stack.pop()
        builder = self.stack.pop()
        if builder is not _LIST_BUILDER or not isinstance(args, tuple) or len(args) != 1:
            raise UnsafePickle("the pickle calls a function")
        self.stack.append(list(args[0]))  # type: ignore[call-overload]


def _pairs(items: list[object], target: dict[object, object]) -> dict[object, object]:
    if len(items) % 2:
        raise BadPickle("a dict with a key but no value")
    for key, value in zip(items[::2], items[1::2], strict=True):
        target[key] = value  # an unhashable key raises TypeError: a corrupt pickle
    return target
