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
from collections.abc import Callable, Iterable

MAX_DEPTH = 64  # nesting of containers; a dump nests five or six deep
# Every value built counts, and a memo reference (or DUP) to a container is a copy that counts
# its whole size: a few hundred bytes of shared lists cannot stand for 2^depth elements, and
# nothing later (str(), the comparison) can expand them. A real dump of 2000 entries with stack
# frames builds some 300,000 values and shares no container.
MAX_ELEMENTS = 4_000_000
MAX_COPIED = 100_000
MAX_INT_BITS = 256  # a dump's numbers are 64-bit; a LONG4 of a megabyte is no count of anything


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
_VALUE_OPS = {
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
}  # fmt: skip
_IGNORED = {"PROTO", "FRAME", "STOP"}
_CONTAINERS = (list, dict, tuple, set, frozenset)
_CONTAINER_TYPES = frozenset(_CONTAINERS)  # only these are ever built


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
        self.elements = 0  # opcodes that built or moved a value
        self.copied = 0  # values in copies of shared containers
        self.depths: dict[int, int] = {}  # id of a container -> its nesting depth
        self.alive: list[object] = []  # every container with a depth, so no id is reused
        self.handlers: dict[str, Callable[[object], None]] = {
            **{name: self._value for name in _VALUE_OPS},
            "NONE": lambda arg: self.stack.append(None),
            "NEWTRUE": lambda arg: self.stack.append(True),
            "NEWFALSE": lambda arg: self.stack.append(False),
            "EMPTY_LIST": lambda arg: self._empty(list),
            "EMPTY_DICT": lambda arg: self._empty(dict),
            "EMPTY_TUPLE": lambda arg: self._empty(tuple),
            "EMPTY_SET": lambda arg: self._empty(set),
            "MARK": lambda arg: self._mark(),
            "POP": lambda arg: self.stack.pop(),
            "POP_MARK": lambda arg: self._take_marked(),
            "DUP": lambda arg: self.stack.append(self._shared(self.stack[-1])),
            "APPEND": lambda arg: self._append(),
            "APPENDS": lambda arg: self._extend(),
            "LIST": lambda arg: self._build(list, self._take_marked()),
            "TUPLE": lambda arg: self._build(tuple, self._take_marked()),
            "TUPLE1": lambda arg: self._tuple(1),
            "TUPLE2": lambda arg: self._tuple(2),
            "TUPLE3": lambda arg: self._tuple(3),
            "DICT": lambda arg: self._build(lambda items: _pairs(items, {}), self._take_marked()),
            "SETITEM": lambda arg: self._setitems(2),
            "SETITEMS": lambda arg: self._setitems(None),
            "ADDITEMS": lambda arg: self._additems(),
            "FROZENSET": lambda arg: self._build(frozenset, self._take_marked()),
            "PUT": lambda arg: self._put(int(arg)),  # type: ignore[call-overload]
            "BINPUT": lambda arg: self._put(arg),
            "LONG_BINPUT": lambda arg: self._put(arg),
            "MEMOIZE": lambda arg: self._put(len(self.memo)),
            "GET": lambda arg: self._get(int(arg)),  # type: ignore[call-overload]
            "BINGET": lambda arg: self._get(arg),
            "LONG_BINGET": lambda arg: self._get(arg),
            "GLOBAL": lambda arg: self._global(str(arg).split(" ", 1)),
            "REDUCE": lambda arg: self._reduce(),
        }

    def step(self, name: str, arg: object, position: int) -> None:
        handler = self.handlers.get(name)
        if handler is None:
            if name in _IGNORED:
                return
            raise UnsafePickle(f"opcode {name} at byte {position} builds objects, not data")
        handler(arg)
        self.elements += 1
        if self.elements > MAX_ELEMENTS:
            raise BadPickle(f"more than {MAX_ELEMENTS:,} values")

    def _value(self, arg: object) -> None:
        if type(arg) is int and arg.bit_length() > MAX_INT_BITS:
            raise BadPickle(f"a number of {arg.bit_length()} bits")
        self.stack.append(arg)

    def _empty(self, make: Callable[[], object]) -> None:
        container = make()
        self.depths[id(container)] = 1
        self.alive.append(container)
        self.stack.append(container)

    def _mark(self) -> None:
        self.marks.append(len(self.stack))
        if len(self.marks) > MAX_DEPTH:
            raise BadPickle(f"nested deeper than {MAX_DEPTH} levels")

    def _get(self, index: object) -> None:
        self.stack.append(self._shared(self.memo[index]))  # type: ignore[index]

    def _shared(self, value: object) -> object:
        """A second reference to a container is a copy, counted whole toward its own budget."""
        if not isinstance(value, _CONTAINERS):
            return value
        self.copied += _size(value)
        if self.copied > MAX_COPIED:
            raise BadPickle(f"shared structure that expands past {MAX_COPIED:,} values")
        return _rebuild(value, self.depths, self.alive)

    def _grew(self, container: object, added: Iterable[object]) -> None:
        """A container made or grown by `added`: its depth is one more than its deepest
        child's, counted on every container opcode (not only MARK)."""
        depths = self.depths
        known = depths.get(id(container))
        depth = known or 1
        for child in added:
            if type(child) in _CONTAINER_TYPES:
                depth = max(depth, depths.get(id(child), 1) + 1)
        if depth > MAX_DEPTH:
            raise BadPickle(f"nested deeper than {MAX_DEPTH} levels")
        if known is None:
            self.alive.append(container)
        depths[id(container)] = depth

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

    def _append(self) -> None:
        item = self.stack.pop()
        target = self._list_at(-1)
        target.append(item)
        if type(item) in _CONTAINER_TYPES:
            self._grew(target, (item,))

    def _extend(self) -> None:
        items = self._take_marked()
        target = self._list_at(-1)
        target.extend(items)
        self._grew(target, items)

    def _tuple(self, size: int) -> None:
        items, self.stack[-size:] = self.stack[-size:], []
        self._build(tuple, items)

    def _build(self, make: Callable[[list[object]], object], items: list[object]) -> None:
        built = make(items)
        self._grew(built, items)
        self.stack.append(built)

    def _setitems(self, count: int | None) -> None:
        if count is None:
            items = self._take_marked()
        else:
            items, self.stack[-count:] = self.stack[-count:], []
        target = self.stack[-1]
        if not isinstance(target, dict):
            raise BadPickle("SETITEM on something that is not a dict")
        _pairs(items, target)
        self._grew(target, items)

    def _additems(self) -> None:
        items = self._take_marked()
        target = self.stack[-1]
        if not isinstance(target, set):
            raise BadPickle("ADDITEMS on something that is not a set")
        target.update(items)
        self._grew(target, items)

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
        self._build(list, list(args[0]))  # type: ignore[call-overload]


def _size(value: object) -> int:
    """The elements of plain data, counted without recursion (stops past any budget)."""
    total, pending = 0, [value]
    while pending:
        item = pending.pop()
        total += 1
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, _CONTAINERS):
            pending.extend(item)  # type: ignore[arg-type]
        if total > MAX_COPIED:
            break  # already past the budget: the caller raises
    return total


def _rebuild(value: object, depths: dict[int, int], alive: list[object]) -> object:
    """A deep copy of plain data already counted and depth-checked (at most MAX_DEPTH deep)."""
    if isinstance(value, dict):
        copied: object = {k: _rebuild(v, depths, alive) for k, v in value.items()}
    elif isinstance(value, list):
        copied = [_rebuild(v, depths, alive) for v in value]
    elif isinstance(value, tuple):
        copied = tuple(_rebuild(v, depths, alive) for v in value)
    elif isinstance(value, (set, frozenset)):
        copied = type(value)(value)
    else:
        return value
    depths[id(copied)] = depths.get(id(value), 1)
    alive.append(copied)
    return copied


def _pairs(items: list[object], target: dict[object, object]) -> dict[object, object]:
    if len(items) % 2:
        raise BadPickle("a dict with a key but no value")
    for key, value in zip(items[::2], items[1::2], strict=True):
        target[key] = value  # an unhashable key raises TypeError: a corrupt pickle
    return target
