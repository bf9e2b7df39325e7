"""Index columns as flat arrays: `ModalityArrays`, numpy <-> Arrow without copies, absent rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ferroload_format._errors import ManifestError
from ferroload_format._index import MODALITY_TYPE


def arrow_array(values: npt.ArrayLike) -> pa.Array:
    """A 1-d numeric numpy array as an Arrow array over the same memory (`pa.array` on a
    numpy array imports pandas, ~0.3-1 s, the first time).

    Examples:
        >>> arrow_array(np.array([2, 0, 1])).to_pylist()
        [2, 0, 1]
    """
    a = np.ascontiguousarray(values).reshape(-1)
    if a.dtype == np.bool_:
        bits = np.packbits(a, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(a), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def numpy_column(arr: pa.Array, *, writable: bool = False) -> npt.NDArray[Any]:
    """A numeric or boolean Arrow array without nulls as a numpy array, read straight
    from its buffers (pyarrow's `to_numpy` imports pandas, ~0.3 s, on first use).

    Raises:
        ValueError: for nulls or a type that is not fixed-width numeric or boolean.

    Examples:
        >>> numpy_column(pa.array([True, False, True])).tolist()
        [True, False, True]
        >>> numpy_column(pa.array([3, 1, 2], pa.int64()).slice(1)).tolist()
        [1, 2]
    """
    t = arr.type
    if arr.null_count:
        raise ValueError(f"numpy_column needs an array without nulls ({arr.null_count} nulls)")
    n, off = len(arr), arr.offset
    if pa.types.is_boolean(t):
        bits = np.frombuffer(arr.buffers()[1], dtype=np.uint8) if n else np.zeros(0, np.uint8)
        return np.unpackbits(bits, bitorder="little")[off : off + n].astype(bool)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise ValueError(f"numpy_column needs a numeric or boolean array, got {t}")
    dtype = np.dtype(t.to_pandas_dtype())
    out = np.frombuffer(arr.buffers()[1], dtype=dtype)[off : off + n] if n else np.zeros(0, dtype)
    return out.copy() if writable else out


@dataclass(frozen=True)
class ModalityArrays:
    """Where every sample's payload of one modality lives, as flat numpy arrays."""

    present: npt.NDArray[np.bool_]
    shard: npt.NDArray[np.int32]
    offset: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    checksum: npt.NDArray[np.uint64]


def absent_modality(n: int) -> pa.StructArray:
    """`n` location structs of absent payloads (present false, zeros)."""
    zeros = np.zeros(n, np.int64)
    return pa.StructArray.from_arrays(
        [
            arrow_array(np.zeros(n, np.bool_)),
            arrow_array(zeros),
            arrow_array(zeros),
            arrow_array(zeros.view(np.uint64)),
        ],
        fields=list(MODALITY_TYPE),
    )


def absent_values(dtype: pa.DataType, n: int) -> pa.Array:
    """What `n` rows that a layer does not cover read as: absent payloads, null values."""
    if dtype == MODALITY_TYPE:
        return absent_modality(n)
    return pa.nulls(n, type=dtype)


def typed_column(col: pa.ChunkedArray, field_type: pa.DataType, *, uri: str, name: str) -> pa.Array:
    """Column `name` as read (of a part or a row group) as the schema's type, in memory of
    its own (not a slice of the table read, which would keep the other groups alive).

    Raises:
        ManifestError: its values do not convert to the schema's type.
    """
    try:
        return pa.concat_arrays(
            [_as_type(c, field_type) for c in col.chunks] or [pa.array([], type=field_type)]
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ManifestError(
            f"column {name!r} of the index of {uri} does not hold "
            f"{field_type} as the manifest's schema says ({exc}). The manifest or "
            "the index was altered; run verify()",
            uri=uri,
            column=name,
        ) from exc


def _as_type(arr: pa.Array, dtype: pa.DataType) -> pa.Array:
    return arr if arr.type == dtype else arr.cast(dtype)
