"""What manifest records share: the `Record` base class and the checks of JSON values.

`Record` reads and writes the manifest's flat records (fields it does not know are kept
in `extra`); the checks refuse, with a TypeError naming the key, a value of the wrong JSON
type, a count that is not a non-negative int64, or a document nested too deep.
`JsonReader` parses the format's JSON documents (manifests, shard-list lines) and refuses
the numbers no field may hold, naming where they are.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import fields
from typing import Any, Self, TypeVar

import pyarrow as pa

from ferroload_format._types import type_from_json, type_to_json

#: Counts, sizes and versions in a manifest fit int64 (they become numpy and Arrow values).
MAX_INT64 = 2**63 - 1
#: The most digits of an integer in the format's JSON: Python's own limit on `int()`
#: (`sys.get_int_max_str_digits()`, which raises a bare ValueError past it); where a
#: program lifted it, a longer integer would be converted in quadratic time.
MAX_JSON_INT_DIGITS = 4300


class _Unfit:
    """A number no field of the format may hold, left in place by `JsonReader` until the
    error names where it is."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what


class JsonReader:
    """Parses the format's JSON documents like `json.loads`, but refuses the numbers no
    field may hold: `NaN`, `Infinity`, `-Infinity`, a float out of range (`1e999`) and an
    integer of more than `MAX_JSON_INT_DIGITS` digits, naming where they are. One reader
    parses many documents (the lines of a shard list) with one decoder; it is not
    thread-safe.

    Integers take json's C path (a hook on each one made a shard list 30% slower to
    read): Python's own limit on the digits `int()` converts refuses a long one, and the
    document is then parsed again with a hook that names where it is. Where a program
    lifted that limit, every integer goes through the hook.
    """

    __slots__ = ("_bounded", "_fast", "_scan", "_unfit")

    def __init__(self) -> None:
        self._unfit = False
        hooks: dict[str, Any] = {"parse_constant": self._constant, "parse_float": self._float}
        self._bounded = json.JSONDecoder(**hooks, parse_int=self._int)
        limit = sys.get_int_max_str_digits()
        native = 0 < limit <= MAX_JSON_INT_DIGITS
        self._fast = json.JSONDecoder(**hooks) if native else self._bounded
        # the C scanner `raw_decode` calls (not in the stubs): (value, end), or StopIteration
        self._scan: Callable[[str, int], tuple[Any, int]] = self._fast.scan_once  # type: ignore[attr-defined]

    def _constant(self, text: str) -> _Unfit:
        self._unfit = True
        return _Unfit(text)

    def _float(self, text: str) -> float | _Unfit:
        value = float(text)
        if math.isinf(value):
            self._unfit = True
            return _Unfit(f"{text[:20]}{'…' if len(text) > 20 else ''}, out of a float's range")
        return value

    def _int(self, text: str) -> int | _Unfit:
        digits = len(text) - text.startswith("-")
        if digits > MAX_JSON_INT_DIGITS:
            self._unfit = True
            return _Unfit(f"an integer of {digits} digits")
        return int(text)

    def loads(self, data: bytes | str, *, what: str = "") -> Any:
        """The value of the JSON document `data` (bytes are decoded as `json.loads` does).

        Args:
            data: the document.
            what: its name, which prefixes the path of a refused number (`line 3`).

        Raises:
            json.JSONDecodeError, UnicodeDecodeError, RecursionError: as `json.loads`.
            ValueError: naming the key path, for a number no field may hold.
        """
        if isinstance(data, str):
            text = data
        else:
            text = data.decode(json.detect_encoding(data), "surrogatepass")
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        self._unfit = False
        try:
            try:  # one value filling the text: json's scanner alone (a shard list's lines)
                value, end = self._scan(text, 0)
            except StopIteration:
                end = -1
            if end != len(text):  # whitespace around it, or an error to report
                value = self._fast.decode(text)
        except ValueError as exc:
            if isinstance(exc, json.JSONDecodeError):
                raise
            value = self._bounded.decode(text)  # Python refused an integer's digits
            if not self._unfit:
                raise
        if self._unfit:
            self._unfit = False
            path, number = _find_unfit(value)
            where = ".".join(p for p in (what, path) if p).replace(".[", "[")
            raise ValueError(
                f"{where or 'the document'} holds {number}: the format's numbers are finite "
                f"and its integers have at most {MAX_JSON_INT_DIGITS} digits"
            )
        return value


def _find_unfit(value: Any) -> tuple[str, str]:
    """The key path of the first `_Unfit` number of `value` (iteratively), and what it is."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        v, path = stack.pop()
        if isinstance(v, _Unfit):
            return path, v.what
        if isinstance(v, dict):
            items = [(c, f"{path}.{k}" if path else str(k)) for k, c in v.items()]
        elif isinstance(v, list):
            items = [(c, f"{path}[{i}]") for i, c in enumerate(v)]
        else:
            continue
        stack.extend(reversed(items))
    return "", "a number"


def split_known(
    raw: dict[str, Any], known: AbstractSet[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of `raw` named in `known`, and the others."""
    return {k: v for k, v in raw.items() if k in known}, {
        k: v for k, v in raw.items() if k not in known
    }


class Record:
    """JSON for the manifest's flat records; fields it does not know go to `extra`."""

    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object, unknown fields included."""
        own = {name: getattr(self, name) for name, _ in _own_fields(type(self))}
        return {**own, **self.extra} if self.extra else own

    @classmethod
    def from_json(cls, raw: Any, *, key: str = "record") -> Self:
        """Parse a record; unknown fields are kept in `extra`.

        Raises:
            TypeError: naming `key` and the field, for a record that is not an object or a
                field of the wrong type (strings must be strings, counts non-negative ints).
        """
        if not isinstance(raw, dict):
            raise TypeError(f"{key} must be a JSON object, not {json_type(raw)}")
        own = _own_fields(cls)
        names = _own_names(cls)
        extra: dict[str, Any]
        if names.issuperset(raw):
            mine, extra = raw, {}
        else:
            mine, extra = split_known(raw, names)
        for name, kind in own:
            if name not in mine:
                continue
            value = mine[name]
            if kind == "str" and not isinstance(value, str):
                raise TypeError(f"{key}.{name} must be a string, not {json_type(value)}")
            if kind == "int" and (type(value) is not int or not 0 <= value <= MAX_INT64):
                check_count(value, f"{key}.{name}")
        try:
            return cls(**mine, extra=extra)  # type: ignore[call-arg]
        except TypeError as exc:  # a missing field
            raise TypeError(f"{key}: {exc}") from None


_FIELDS: dict[type, tuple[tuple[tuple[str, str], ...], frozenset[str]]] = {}


def _own_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(name, annotation) of a record class's fields, `extra` left out (looked up once per
    class: a manifest has a record per shard)."""
    return _fields_of(cls)[0]


def _own_names(cls: type) -> frozenset[str]:
    return _fields_of(cls)[1]


def _fields_of(cls: type) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
    got = _FIELDS.get(cls)
    if got is None:
        own = tuple((f.name, str(f.type)) for f in fields(cls) if f.name != "extra")
        got = _FIELDS[cls] = (own, frozenset(name for name, _ in own))
    return got


def json_type(value: Any) -> str:
    """What `value` is, in JSON's words, for errors: `an object`, `null`, `a number`, …"""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def check_count(value: Any, key: str) -> int:
    """`value` if it is a non-negative integer that fits int64, else a TypeError naming `key`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_INT64:
        raise TypeError(f"{key} must be a non-negative integer below 2**63, not {value!r}")
    return value


def check_object(raw: Any, key: str) -> dict[str, Any]:
    """A copy of `raw` if it is a JSON object, else a TypeError naming `key`."""
    if not isinstance(raw, dict):
        raise TypeError(f"{key} must be a JSON object, not {json_type(raw)}")
    return dict(raw)


def check_array(raw: Any, key: str) -> list[Any]:
    """`raw` if it is a JSON array, else a TypeError naming `key`."""
    if not isinstance(raw, list):
        raise TypeError(f"{key} must be a JSON array, not {json_type(raw)}")
    return raw


_R = TypeVar("_R", bound=Record)


def parse_records(cls: type[_R], raw: Any, key: str) -> tuple[_R, ...]:
    """Each record of the JSON array `raw`, parsed as a `cls` named `key[i]`."""
    return tuple(cls.from_json(r, key=f"{key}[{i}]") for i, r in enumerate(check_array(raw, key)))


def check_json_depth(raw: Any, *, limit: int, what: str) -> None:
    """Raise TypeError when `raw` nests objects/arrays deeper than `limit` (iteratively: a
    hostile document cannot exhaust the stack here)."""
    if not isinstance(raw, dict | list):
        return
    stack: list[tuple[Any, int]] = [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            raise TypeError(f"{what} nests deeper than {limit} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def fields_to_json(fields: tuple[pa.Field, ...]) -> list[dict[str, Any]]:
    """Metadata columns as the manifest writes them: `{"name": …, "type": …}` each."""
    return [{"name": f.name, "type": type_to_json(f.type)} for f in fields]


def fields_from_json(raw: Any, key: str) -> tuple[pa.Field, ...]:
    """The metadata columns of the JSON array `raw` (see `fields_to_json`), else a
    TypeError naming `key`."""
    out = []
    for i, f in enumerate(check_array(raw, key)):
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise TypeError(f"{key}[{i}] must be an object with a string 'name'")
        out.append(pa.field(f["name"], type_from_json(f["type"])))
    return tuple(out)
