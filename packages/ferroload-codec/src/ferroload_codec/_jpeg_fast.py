"""The lean decode path for batches of JPEGs already at the output size and mode.

Tiny JPEGs (32x32: ~1.1 KB, ~10 us in libjpeg-turbo) cost about as much in the Python
around each image as in the decoder. The general path reads the frame header with
`_sniff.jpeg_frame` (~2.7 us), then calls the system's libjpeg-turbo through ctypes,
whose hand-over of the GIL costs more than such an image's decompression; so it keeps
the GIL for tiny images and decodes their batches on one thread (see `_turbo`).

This path decodes them through simplejpeg instead, a Cython binding of libjpeg-turbo
that releases the GIL while it decodes, straight into the batch, with as little Python
as it can: one `struct` call reads the SOI, each segment's marker and length and the
frame header at the offsets the batch's first item has them (encoders write the same
layout for all images of one size and quality), else a walk of the segments (~0.9 us)
that takes only the plainest layout (each segment right after the last: no fill bytes,
stray bytes or standalone markers) and leaves all else to the general path; then one
`simplejpeg.decode_jpeg(..., buffer=target, strict=True)`. Its batches decode on all
the pool's threads: 20,000 32x32 JPEGs in batches of 256 on 2 cores, ~66k images/s on
one thread and ~77k on two, against ~36k through the system binding (see `_turbo`).

An item is accepted only when its frame header says 8-bit, one or three components
(grey or YCbCr/RGB: no CMYK, which the general path leaves to Pillow), and exactly the
output's size (no DCT scaling, no resize), and when simplejpeg decoded it without even
a warning (`strict`: a truncated file, stray bytes) into an array of exactly the
target's shape (simplejpeg writes a smaller image into the front of a larger buffer).
Anything else returns False, and the general path decodes the item, reporting errors
as it always did. The pixels are the general path's, bit for bit (the tests compare
them on both libjpeg-turbos). EXIF orientation is not read here: a decoder with
`exif=True` does not take this path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_codec._backends import simplejpeg
from ferroload_core import JPEG_SOF_MARKERS

#: simplejpeg's names of the output modes, by channels.
_COLORSPACES = {1: "GRAY", 3: "RGB", 4: "RGBA"}
#: Markers whose segment libjpeg reads or skips before the frame header by its length
#: (DQT, DHT, DAC, DRI, APPn, COM); any other marker before the frame, or one of these
#: with a length under 2, sends the item to the general path and its full walk.
_PLAIN_SEGMENTS = frozenset((0xDB, 0xC4, 0xCC, 0xDD, *range(0xE0, 0xF0), 0xFE))


def _plain_segments(data: Any) -> list[tuple[int, int, int]] | None:
    """(offset, marker, length) of each segment of a JPEG up to and including its frame
    header, when they follow each other plainly (see `jpeg_plain_frame`), else None."""
    unpack = struct.unpack_from
    n = len(data)
    if n < 4 or data[0] != 0xFF or data[1] != 0xD8:
        return None
    segments = []
    pos = 2
    while pos + 4 <= n:
        ff, marker, length = unpack(">BBH", data, pos)
        if ff != 0xFF or length < 2:
            return None
        segments.append((pos, marker, length))
        if marker in JPEG_SOF_MARKERS:
            return segments if length >= 8 and pos + 10 <= n else None
        if marker not in _PLAIN_SEGMENTS:
            return None
        pos += 2 + length
    return None


def jpeg_plain_frame(data: Any) -> tuple[int, int, int, int] | None:
    """(precision, height, width, components) from the frame header of a JPEG whose
    segments before it follow each other plainly (each right after the last: no fill
    bytes, no standalone markers, no stray bytes), else None (not a JPEG, or a layout
    for `_sniff.jpeg_frame`, which follows all of libjpeg's grammar).

    Where this finds a frame header, it is the one `jpeg_frame` (and libjpeg) reads: the
    walk stops at the first marker it does not know as a plain segment.
    """
    segments = _plain_segments(data)
    if segments is None:
        return None
    frame: tuple[int, int, int, int] = struct.unpack_from(">BHHB", data, segments[-1][0] + 4)
    return frame


def _layout_reader(first: Any) -> tuple[Callable[[Any], tuple[Any, ...]], int, tuple[Any, ...]]:
    """A reader of the SOI, every segment's marker and length and the frame header at the
    offsets `first` has them (one `struct` call), the bytes it needs, and what it reads
    in `first`. An item it reads the same of has the same plain layout and frame header:
    the walk of `jpeg_plain_frame` would take the same steps to the same frame. Encoders
    write the same layout for every image of one size and quality (the tables differ,
    not their lengths), and one call costs less than half the walk."""
    segments = _plain_segments(first)
    assert segments is not None  # the caller found its frame
    fmt, end = ">BB", 2
    for pos, _marker, _length in segments:
        fmt += f"{pos - end}xBBH"
        end = pos + 4
    fmt += "BHHB"
    reader = struct.Struct(fmt)
    return reader.unpack_from, reader.size, reader.unpack_from(first)


def same_size_jpeg(
    first: Any, size: tuple[int, int] | None, channels: int, *, max_pixels: int, exif: bool
) -> Callable[[Any, npt.NDArray[np.uint8]], bool] | None:
    """A lean path for a batch of JPEGs already at the output size, or None.

    None unless simplejpeg is there, the decoder reads no EXIF orientation, and the
    batch's `first` item is such a JPEG (a batch of larger JPEGs would pay the header
    walk for nothing, and keeps the general path's thread rule). The function returned
    decodes an item into `target` (the batch's C-contiguous `(h, w, channels)` slot)
    and says whether it did; False leaves the item to the general path (`target` may
    then hold anything: that path overwrites it or zeroes it).
    """
    sj = simplejpeg()
    if sj is None or size is None or exif or channels not in _COLORSPACES:
        return None
    th, tw = size
    if th * tw > max_pixels:
        return None
    if type(first) is memoryview and not first.c_contiguous:
        return None
    want = {(8, th, tw, 1), (8, th, tw, 3)}
    if jpeg_plain_frame(first) not in want:
        return None
    decode = sj.module.decode_jpeg
    colorspace = _COLORSPACES[channels]
    shape = (th, tw, channels)
    frame = jpeg_plain_frame
    read_layout, layout_size, layout = _layout_reader(first)

    def fast(item: Any, target: npt.NDArray[np.uint8]) -> bool:
        kind = type(item)  # exact types only: this runs once per image
        if kind is memoryview:
            if not item.c_contiguous:  # simplejpeg would read its bytes as if it were
                return False
        elif kind is not bytes:
            return False
        # the first item's layout (one struct call), else the walk (~0.9 us)
        if not (len(item) >= layout_size and read_layout(item) == layout) and (
            frame(item) not in want
        ):
            return False
        try:
            got = decode(item, colorspace, buffer=target, strict=True)
        except Exception:
            return False
        return got.shape == shape  # type: ignore[no-any-return]

    return fast
