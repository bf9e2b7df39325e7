"""Metadata types: inference from Python values, merging, and their JSON form in manifests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_SCALARS: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
}
_SCALAR_NAMES = {t: n for n, t in _SCALARS.items()}

#: Python scalar type -> Arrow type; the writer's fast path checks `type(value)` here.
PY_SCALARS: dict[type, pa.DataType] = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
}


class TypeConflictError(TypeError):
    """Internal: two values whose types cannot share a column (the writer adds context)."""


def infer_type(value: Any) -> pa.DataType:
    """The Arrow type ferroload stores `value` as (`null` for None).

    Raises:
        TypeConflictError: for values that have no metadata type, or lists mixing types.
    """
    t = PY_SCALARS.get(type(value))
    if t is not None:
        if t == pa.int64() and not INT64_MIN <= value <= INT64_MAX:
            raise TypeConflictError(f"integer {value} does not fit in int64")
        return t
    if value is None:
        return pa.null()
    if isinstance(value, np.generic):
        return _numpy_scalar_type(value.dtype, value)
    if isinstance(value, (list, tuple)):
        item: pa.DataType = pa.null()
        for v in value:
            item = merge_types(item, infer_type(v))
        return pa.list_(item)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise TypeConflictError(
                f"numpy arrays must be 1-d to be metadata, got shape {value.shape}"
            )
        return pa.list_(_numpy_scalar_type(value.dtype, None))
    if isinstance(value, Mapping):
        fields = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeConflictError(f"dict keys must be str, got {type(k).__name__} {k!r}")
            fields.append(pa.field(k, infer_type(v)))
        return pa.struct(fields)
    for base in PY_SCALARS:  # subclasses of the scalar types: IntEnum, StrEnum, …
        if isinstance(value, base):
            return infer_type(base(value))
    raise TypeConflictError(f"values of type {type(value).__name__} cannot be stored as metadata")


def _numpy_scalar_type(dtype: np.dtype[Any], value: Any) -> pa.DataType:
    if dtype.kind == "b":
        return pa.bool_()
    if dtype.kind in "iu":
        if dtype.kind == "u" and dtype.itemsize == 8 and value is not None and value > INT64_MAX:
            raise TypeConflictError(f"integer {value} does not fit in int64")
        return pa.int64()
    if dtype.kind == "f":
        return pa.float64()
    if dtype.kind == "U":
        return pa.string()
    if dtype.kind == "S":
        return pa.binary()
    raise TypeConflictError(f"numpy dtype {dtype} cannot be stored as metadata")


def merge_types(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type of a column that holds values of types `a` and `b`.

    `null` merges with anything; `int64` widens to `float64`; lists and structs merge
    item- and field-wise (a field missing on one side is null there).

    Raises:
        TypeConflictError: if no such type exists.
    """
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    numeric = {pa.int64(), pa.float64()}
    if a in numeric and b in numeric:
        return pa.float64()
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(merge_types(a.value_type, b.value_type))
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        names = [f.name for f in a] + [f.name for f in b if a.get_field_index(f.name) < 0]
        fields = []
        for name in names:
            ia, ib = a.get_field_index(name), b.get_field_index(name)
            ta = a.field(ia).type if ia >= 0 else pa.null()
            tb = b.field(ib).type if ib >= 0 else pa.null()
            fields.append(pa.field(name, merge_types(ta, tb)))
        return pa.struct(fields)
    raise TypeConflictError(f"{type_name(a)} and {type_name(b)} cannot share a column")


def fits_in(value_type: pa.DataType, column_type: pa.DataType) -> bool:
    """True when values of `value_type` can be stored in an existing `column_type`."""
    try:
        return bool(merge_types(column_type, value_type) == column_type)
    except TypeConflictError:
        return False


def type_name(t: pa.DataType) -> str:
    """A short readable name (`int64`, `list<float64>`, `struct<a: string>`)."""
    if pa.types.is_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {type_name(f.type)}" for f in t) + ">"
    return _SCALAR_NAMES.get(t, str(t))


def type_to_json(t: pa.DataType) -> Any:
    """The manifest's JSON form of a metadata type (see docs/format.md §6)."""
    if pa.types.is_list(t):
        return {"list": type_to_json(t.value_type)}
    if pa.types.is_struct(t):
        return {"struct": [{"name": f.name, "type": type_to_json(f.type)} for f in t]}
    name = _SCALAR_NAMES.get(t)
    if name is None:
        raise ValueError(f"Arrow type {t} has no ferroload metadata form")
    return name


def type_from_json(j: Any) -> pa.DataType:
    """Inverse of `type_to_json`.

    Raises:
        ValueError: for a form this format version does not define.
    """
    if isinstance(j, str) and j in _SCALARS:
        return _SCALARS[j]
    if isinstance(j, dict) and set(j) == {"list"}:
        return pa.list_(type_from_json(j["list"]))
    if isinstance(j, dict) and set(j) == {"struct"} and isinstance(j["struct"], list):
        return pa.struct([pa.field(f["name"], type_from_json(f["type"])) for f in j["struct"]])
    raise ValueError(f"unknown metadata type {j!r}")


#: The deepest nesting of lists and dicts in one metadata value (docs/format.md,
#: "Limits"): a value nested deeper is refused at `Writer.add`. Parquet and Arrow read
#: back schemas only up to about 100 levels, and a list takes three of them.
MAX_METADATA_DEPTH = 32


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a lone UTF-16 surrogate (which UTF-8, Arrow and JSON refuse)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def type_depth(t: pa.DataType) -> int:
    """How deep lists and structs nest in `t` (a scalar is 0). Iterative."""
    deepest, stack = 0, [(t, 0)]
    while stack:
        t, depth = stack.pop()
        deepest = max(deepest, depth)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            stack.append((t.value_type, depth + 1))
        elif pa.types.is_struct(t):
            stack.extend((f.type, depth + 1) for f in t)
    return deepest


def nesting_problem(value: Any) -> str | None:
    """Why a metadata value cannot be stored (too deep, or a key or string with a lone
    surrogate), else None. Iterative: a hostile value cannot exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if has_lone_surrogate(v):
                return f"holds the string {v!r} with a lone surrogate, which is not valid UTF-8"
        elif isinstance(v, Mapping | list | tuple):
            if depth >= MAX_METADATA_DEPTH:
                return (
                    f"nests lists and dicts deeper than {MAX_METADATA_DEPTH} levels "
                    "(MAX_METADATA_DEPTH); Parquet could not read such a column back"
                )
            if isinstance(v, Mapping):
                for k in v:
                    if isinstance(k, str) and has_lone_surrogate(k):
                        return f"has the key {k!r} with a lone surrogate, which is not valid UTF-8"
                children: Any = v.values()
            else:
                children = v
            stack.extend((c, depth + 1) for c in children)
    return None
