"""Arrow columns as the values a `Writer` stores as metadata, a whole column at a time.

The index holds `bool`, `int64`, `float64`, `string`, `binary`, lists and structs of
them (docs/format.md §5). Other Arrow types are cast, column-wise, to the nearest of
those: dates, times, timestamps and decimals to their string form (ISO-like, exact),
durations to int64, half floats to float, dictionaries to their values, maps to lists
of `{key, value}` structs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def storable_type(t: pa.DataType) -> pa.DataType:
    """The type `t` is cast to before its values become metadata."""
    if pa.types.is_dictionary(t):
        return storable_type(t.value_type)
    if (
        pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_decimal(t)
    ):
        return pa.string()
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_map(t):
        item = pa.struct(
            [
                pa.field("key", storable_type(t.key_type)),
                pa.field("value", storable_type(t.item_type)),
            ]
        )
        return pa.list_(item)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(storable_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, storable_type(f.type)) for f in t])
    return t


def meta_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """The Python values of a column, cast as `storable_type` says."""
    target = storable_type(column.type)
    if target != column.type:
        if pa.types.is_map(column.type):
            column = _map_as_list(column)
        if target != column.type:
            column = column.cast(target)
    return column.to_pylist()  # type: ignore[no-any-return]


def _map_as_list(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    entries = pa.StructArray.from_arrays([arr.keys, arr.items], names=["key", "value"])
    return pa.ListArray.from_arrays(arr.offsets, entries, mask=arr.is_null())
