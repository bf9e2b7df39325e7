"""The lean decode path for batches of small 8-bit PNGs already at the output size and mode."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_codec._backends import imagecodecs
from ferroload_codec._sniff import png_strip_inflated
from ferroload_core import PNG_MAGIC

# A PNG's signature and the length and type of its first chunk, the header
_PNG_HEAD = PNG_MAGIC + b"\x00\x00\x00\rIHDR"


def same_size_png(
    size: tuple[int, int] | None, channels: int, *, max_pixels: int, exif: bool
) -> Callable[[Any, npt.NDArray[np.uint8]], bool] | None:
    """A lean path for batches of 8-bit PNGs already at the output size and mode.

    Tiny images (32x32) cost about 35 µs in libspng; the general path's checks add
    about 7 µs more, all of it holding the GIL, which keeps two threads from scaling.
    This path checks the header with one `struct` call, walks the chunk headers (no
    compressed text or ICC profile for libspng to inflate) and decodes straight into the
    batch; anything else (or any failure) takes the general path, which also reports
    the errors. Decoders that augment or convert their output do not take it.
    """
    ic = imagecodecs()
    if ic is None or size is None or exif:
        return None
    th, tw = size
    if th * tw > max_pixels:
        return None
    color = {1: 0, 3: 2, 4: 6}[channels]
    spng_decode = ic.spng_decode
    unpack = struct.unpack_from
    strip = png_strip_inflated

    def fast(item: Any, target: npt.NDArray[np.uint8]) -> bool:
        kind = type(item)  # exact types only: this runs once per image
        if kind is not bytes and kind is not memoryview:
            return False  # (anything else, not a buffer too, is for the general path)
        # 57 bytes: the signature, IHDR, and empty IDAT and IEND chunks
        size = len(item)
        if size < 57:
            return False
        # struct reads the header fields straight from the buffer: slicing a memoryview
        # (a loader's payloads are views of mapped shards) and comparing the slice costs
        # more than the whole unpack
        head, width, height, depth, ctype, length, chunk = unpack(">16sIIBB7xI4s", item)
        if head != _PNG_HEAD or width != tw or height != th or depth != 8 or ctype != color:
            return False
        # IHDR, one IDAT, IEND (what most encoders write for a small image) has no
        # compressed text or ICC profile; anything else is walked, and one that has
        # such chunks takes the general path, which drops them
        iend = 49 + length
        simple = chunk == b"IDAT" and iend + 4 <= size and unpack(">4s", item, iend)[0] == b"IEND"
        if not simple and strip(item) is not item:
            return False
        try:
            spng_decode(item, out=target)
        except Exception:
            return False
        return True

    return fast
