from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferroload_format._types import (
    TypeConflictError,
    infer_type,
    merge_types,
    type_from_json,
    type_to_json,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, pa.bool_()),
        (3, pa.int64()),
        (np.int32(3), pa.int64()),
        (2.5, pa.float64()),
        (np.float32(1.0), pa.float64()),
        ("x", pa.string()),
        (b"x", pa.binary()),
        (None, pa.null()),
        ([1, 2], pa.list_(pa.int64())),
        ([1, 2.5], pa.list_(pa.float64())),
        ([], pa.list_(pa.null())),
        (np.array([1.0, 2.0]), pa.list_(pa.float64())),
        ({"a": 1, "b": ["x"]}, pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])),
    ],
)
def test_inference(value: Any, expected: pa.DataType) -> None:
    assert infer_type(value) == expected


@pytest.mark.parametrize("value", [object(), 2**64, {1: "a"}, np.zeros((2, 2)), [1, "a"], 1 + 2j])
def test_values_without_a_metadata_type(value: Any) -> None:
    with pytest.raises(TypeConflictError):
        infer_type(value)


def test_merge_rules() -> None:
    assert merge_types(pa.int64(), pa.float64()) == pa.float64()
    assert merge_types(pa.null(), pa.string()) == pa.string()
    a = pa.struct([("x", pa.int64())])
    b = pa.struct([("y", pa.string())])
    assert merge_types(a, b) == pa.struct([("x", pa.int64()), ("y", pa.string())])
    for x, y in [
        (pa.int64(), pa.string()),
        (pa.bool_(), pa.int64()),
        (pa.list_(pa.int64()), pa.int64()),
    ]:
        with pytest.raises(TypeConflictError):
            merge_types(x, y)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(min_size=1, max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(json_values)
def test_inferred_types_round_trip_through_json_and_arrow(value: Any) -> None:
    try:
        t = infer_type(value)
    except TypeConflictError:
        return  # e.g. a list mixing str and int
    assert type_from_json(type_to_json(t)) == t
    try:
        arr = pa.array([value, None], type=t)
    except pa.ArrowInvalid as exc:
        message = str(exc)
    else:
        assert arr.to_pylist() == [_filled(value, t), None]
        return
    # the one case the type rules allow and Arrow does not: an int beyond 2**53 widened to
    # float64 (the writer refuses such values, see test_writer.py)
    assert "exactly representable" in message


def _filled(value: Any, t: pa.DataType) -> Any:
    """`value` as Arrow gives it back: struct fields a dict lacks come back as None."""
    if value is None:
        return None
    if pa.types.is_struct(t):
        return {f.name: _filled(value.get(f.name), f.type) for f in t}
    if pa.types.is_list(t):
        return [_filled(v, t.value_type) for v in value]
    if pa.types.is_floating(t):
        return float(value)
    return value
