"""Frozen dataclasses to and from plain JSON values, driven by their type hints."""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


class CodecError(ValueError):
    """A JSON value does not fit the dataclass it should fill."""


def to_jsonable(value: Any) -> Any:
    if value is None or type(value) in (str, int, float, bool):
        return value
    names = _field_names(type(value))
    if names is not None:
        return {name: to_jsonable(getattr(value, name)) for name in names}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


def from_jsonable(cls: type[T], data: Any, where: str = "") -> T:
    """Builds `cls` from `data`; missing fields take their defaults, unknown ones are ignored."""
    return _convert(cls, data, where or cls.__name__)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """A dataclass's field names (None for any other type), looked up once per class."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls))


@cache
def _field_plan(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    """(name, type, required) of each field of a dataclass, looked up once per class."""
    hints = _hints(cls)
    return tuple(
        (
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


@cache
def _shape(tp: Any) -> tuple[str, Any]:
    """What kind of type `tp` is, decided once per type."""
    if tp is Any or tp is object:
        return "any", None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return "union", typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return "dataclass", None
    if origin is tuple:
        return "tuple", typing.get_args(tp)
    if origin is dict or origin is typing.get_origin(typing.Mapping[str, int]):
        return "mapping", typing.get_args(tp)[1]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "enum", None
    return "scalar", None


def _convert(tp: Any, data: Any, where: str) -> Any:
    kind, args = _shape(tp)
    if kind == "any":
        return data
    if kind == "union":
        return _convert_union(args, data, where)
    if kind == "dataclass":
        return _convert_dataclass(tp, data, where)
    if kind == "tuple":
        return _convert_tuple(args, data, where)
    if kind == "mapping":
        _expect(isinstance(data, dict), data, "an object", where)
        return {str(k): _convert(args, v, f"{where}.{k}") for k, v in data.items()}
    if kind == "enum":
        try:
            return tp(data)
        except ValueError:
            raise CodecError(f"{where}: {data!r} is not a valid {tp.__name__}") from None
    return _convert_scalar(tp, data, where)


def _convert_union(options: tuple[Any, ...], data: Any, where: str) -> Any:
    if data is None:
        _expect(type(None) in options, data, "a value", where)
        return None
    for option in options:  # the common case: a plain value of one of the options
        if option in (str, int, float, bool) and type(data) is option:
            return data
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return _convert(option, data, where)
        except CodecError as error:
            errors.append(str(error))
    raise CodecError(errors[0] if errors else f"{where}: unexpected {data!r}")


def _convert_dataclass(cls: type, data: Any, where: str) -> Any:
    _expect(isinstance(data, dict), data, "an object", where)
    values = {}
    for name, hint, required in _field_plan(cls):
        if name in data:
            values[name] = _convert(hint, data[name], f"{where}.{name}")
        elif required:
            raise CodecError(f"{where}: missing field {name!r}")
    return cls(**values)


def _convert_tuple(args: tuple[Any, ...], data: Any, where: str) -> tuple[Any, ...]:
    _expect(isinstance(data, list), data, "a list", where)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
    _expect(len(data) == len(args), data, f"a list of {len(args)}", where)
    return tuple(
        _convert(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(args, data, strict=True))
    )


def _convert_scalar(tp: Any, data: Any, where: str) -> Any:
    if tp is float:
        _expect(
            isinstance(data, (int, float)) and not isinstance(data, bool), data, "a number", where
        )
        return float(data)
    if tp is int:
        _expect(isinstance(data, int) and not isinstance(data, bool), data, "an integer", where)
        return data
    if tp is bool:
        _expect(isinstance(data, bool), data, "true or false", where)
        return data
    if tp is str:
        _expect(isinstance(data, str), data, "a string", where)
        return data
    raise CodecError(f"{where}: cannot decode type {tp!r}")


def _expect(condition: bool, data: Any, what: str, where: str) -> None:
    if not condition:
        raise CodecError(f"{where}: expected {what}, got {type(data).__name__}")
