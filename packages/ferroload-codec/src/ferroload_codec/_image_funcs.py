"""The one-call image functions: `decode_image` and `decode_images` over an `ImageDecoder`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_codec._image import DEFAULT_MAX_PIXELS, ImageDecoder
from ferroload_codec._pixels import ImageMode
from ferroload_codec._resize import Interpolation, ResizeMode
from ferroload_codec._sniff import Buffer


def decode_image(
    data: Buffer,
    *,
    size: int | tuple[int, int] | None = None,
    mode: ImageMode = "RGB",
    resize: ResizeMode = "exact",
    interpolation: Interpolation = "bilinear",
    exif: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    pad_value: int = 0,
    out: npt.NDArray[np.uint8] | None = None,
    sample_id: str | None = None,
) -> npt.NDArray[np.uint8]:
    """Decode one image to a uint8 HWC array (see `ImageDecoder` for the options).

    Examples:
        >>> import io
        >>> from PIL import Image
        >>> buf = io.BytesIO()
        >>> Image.new("RGB", (300, 200), "white").save(buf, "JPEG")
        >>> decode_image(buf.getvalue(), size=224, resize="shorter").shape
        (224, 224, 3)
    """
    dec = ImageDecoder(
        size, mode=mode, resize=resize, interpolation=interpolation, exif=exif,
        max_pixels=max_pixels, pad_value=pad_value, threads=1,
    )  # fmt: skip
    return dec.decode(data, out=out, sample_id=sample_id)


_SHARED: dict[tuple[Any, ...], ImageDecoder] = {}


def decode_images(
    items: Sequence[Buffer],
    *,
    size: int | tuple[int, int],
    mode: ImageMode = "RGB",
    resize: ResizeMode = "exact",
    interpolation: Interpolation = "bilinear",
    exif: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    pad_value: int = 0,
    threads: int | None = None,
    out: npt.NDArray[np.uint8] | None = None,
    sample_ids: Sequence[str] | None = None,
) -> npt.NDArray[np.uint8]:
    """Decode a batch into one uint8 NHWC array on a thread pool (raises on the first error).

    Decoders are cached per option set, so repeated calls reuse their threads.

    Examples:
        >>> import io
        >>> from PIL import Image
        >>> buf = io.BytesIO()
        >>> Image.new("L", (40, 40), 128).save(buf, "PNG")
        >>> decode_images([buf.getvalue()] * 3, size=(16, 20)).shape
        (3, 16, 20, 3)
    """
    key = (size, mode, resize, interpolation, exif, max_pixels, pad_value, threads)
    dec = _SHARED.get(key)
    if dec is None:
        dec = _SHARED.setdefault(
            key,
            ImageDecoder(
                size, mode=mode, resize=resize, interpolation=interpolation, exif=exif,
                max_pixels=max_pixels, pad_value=pad_value, threads=threads,
            ),
        )  # fmt: skip
    return dec.decode_batch(items, out=out, sample_ids=sample_ids).images
