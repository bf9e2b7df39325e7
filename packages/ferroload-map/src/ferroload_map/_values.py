"""Turning what a map function returns into Arrow columns and payload bytes, one problem
per value that does not fit its declared type."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

if TYPE_CHECKING:
    from ferroload_format import Modality

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
_IMAGE_FORMATS = {
    "png": "PNG",
    "jpg": "JPEG",
    "jpeg": "JPEG",
    "webp": "WEBP",
    "bmp": "BMP",
    "tif": "TIFF",
    "tiff": "TIFF",
    "gif": "GIF",
}


class ValueProblemError(Exception):
    """Output value `index` of a batch does not fit its declaration (internal)."""

    def __init__(self, index: int, why: str) -> None:
        self.index = index
        self.why = why
        super().__init__(why)


def to_arrow(values: Any, t: pa.DataType, n: int) -> tuple[pa.Array, list[ValueProblemError]]:
    """`values` as an Arrow array of type `t`; values that do not fit are problems (and
    nulls in the array)."""
    try:
        arr = _infer(values)
        if _compatible(arr.type, t):
            return arr.cast(t, safe=True), []
    except (*_ARROW_ERRORS, TypeError, ValueError):
        pass
    problems: list[ValueProblemError] = []
    items: list[Any] = []
    for i in range(n):
        v = values[i]
        try:
            one = _infer([v] if not isinstance(v, np.ndarray) or v.ndim == 0 else v[np.newaxis])
            if not _compatible(one.type, t):
                raise ValueProblemError(i, f"{_show(v)} is not a {_type_name(t)}")
            one.cast(t, safe=True)
        except ValueProblemError as p:
            problems.append(p)
            items.append(None)
        except (*_ARROW_ERRORS, TypeError, ValueError) as exc:
            problems.append(ValueProblemError(i, f"{_show(v)} does not fit {_type_name(t)}: {exc}"))
            items.append(None)
        else:
            items.append(one.cast(t, safe=True))
    if not problems:  # each value fits alone but not together (e.g. mixed nesting)
        return pa.concat_arrays(items), []
    return pa.concat_arrays([a if a is not None else pa.nulls(1, t) for a in items]), problems


def _infer(values: Any) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    if not isinstance(values, np.ndarray) and hasattr(values, "__array__"):
        values = np.asarray(values)  # torch tensors and the like
    if isinstance(values, np.ndarray):
        if values.dtype == object or values.ndim <= 1:
            return pa.array(values.tolist() if values.dtype == object else values)
        flat = pa.array(values.reshape(-1))
        for size in reversed(values.shape[1:]):
            flat = pa.FixedSizeListArray.from_arrays(flat, size)
        return flat
    return pa.array(list(values))


def _compatible(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether values of `src` may be stored as `dst` (Arrow's safe cast then checks
    overflow and truncation). Stricter than Arrow: no numbers to text or back, no
    numbers to bool."""
    if pa.types.is_null(src) or src == dst:
        return True
    if pa.types.is_boolean(dst):
        return bool(pa.types.is_boolean(src))
    if pa.types.is_integer(dst):
        return bool(pa.types.is_integer(src) or pa.types.is_floating(src))
    if pa.types.is_floating(dst):
        return bool(pa.types.is_integer(src) or pa.types.is_floating(src))
    if pa.types.is_string(dst) or pa.types.is_large_string(dst):
        return bool(pa.types.is_string(src) or pa.types.is_large_string(src))
    if pa.types.is_binary(dst) or pa.types.is_large_binary(dst):
        return bool(
            pa.types.is_binary(src)
            or pa.types.is_large_binary(src)
            or pa.types.is_fixed_size_binary(src)
        )
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(f(dst) for f in lists):
        return any(f(src) for f in lists) and _compatible(src.value_type, dst.value_type)
    if pa.types.is_struct(dst):
        return bool(pa.types.is_struct(src))
    return False


def to_payloads(values: Any, mod: Modality) -> tuple[list[bytes | None], list[ValueProblemError]]:
    out: list[bytes | None] = []
    problems: list[ValueProblemError] = []
    n = values.shape[0] if isinstance(values, np.ndarray) else len(values)
    for i in range(n):
        try:
            out.append(_payload(values[i], mod, i))
        except ValueProblemError as p:
            problems.append(p)
            out.append(None)
    return out, problems


def _payload(value: Any, mod: Modality, i: int) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str) and mod.kind == "text":
        return value.encode("utf-8")
    if isinstance(value, np.ndarray):
        if mod.ext.lower() == "npy":
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            return buf.getvalue()
        fmt = _IMAGE_FORMATS.get(mod.ext.lower())
        if fmt is not None:
            return _encode_image(value, fmt, i)
    raise ValueProblemError(
        i,
        f"{_show(value)} cannot be stored as .{mod.ext}: return encoded bytes"
        + (
            ", or a uint8 HxW / HxWxC array"
            if mod.ext.lower() in _IMAGE_FORMATS
            else ", or a numpy array"
            if mod.ext.lower() == "npy"
            else ", or a str"
            if mod.kind == "text"
            else ""
        ),
    )


def _encode_image(arr: npt.NDArray[Any], fmt: str, i: int) -> bytes:
    from PIL import Image

    if arr.dtype != np.uint8 or arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] > 4):
        raise ValueProblemError(
            i,
            f"an image array must be uint8 HxW or HxWxC (C = 1, 3 or 4), got {arr.dtype} "
            f"of shape {arr.shape}",
        )
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if fmt == "WEBP" and not _pillow_writes_webp():
        return _webp_encode(arr, i)
    buf = io.BytesIO()
    try:
        Image.fromarray(np.ascontiguousarray(arr)).save(buf, fmt)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueProblemError(
            i, f"could not encode an array of shape {arr.shape} as {fmt}: {exc}"
        ) from None
    return buf.getvalue()


def _pillow_writes_webp() -> bool:
    from PIL import features

    return bool(features.check_module("webp"))


def _webp_encode(arr: npt.NDArray[Any], i: int) -> bytes:
    """WebP through imagecodecs' libwebp, for a Pillow built without it (a source build of
    Pillow-SIMD on a machine without libwebp's headers); Pillow's default quality, 80."""
    import imagecodecs

    try:
        return bytes(imagecodecs.webp_encode(np.ascontiguousarray(arr), level=80))
    except Exception as exc:
        raise ValueProblemError(
            i, f"could not encode an array of shape {arr.shape} as WEBP: {exc}"
        ) from None


def _type_name(t: pa.DataType) -> str:
    from ferroload_map._spec import type_string

    return type_string(t)


def _show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype} and shape {value.shape}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
