"""Format detection from the first bytes, and the few headers read without a decoder."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ferroload_codec._errors import DecodeError
from ferroload_core import JPEG_SOF_MARKERS, sniff_image

#: What the decoders accept as encoded input.
Buffer = bytes | bytearray | memoryview


def as_buffer(data: Any, sample_id: str | None, format: str | None = None) -> Buffer:
    """Encoded input as a flat byte buffer; a `DecodeError` for anything else or nothing.

    Accepts bytes, bytearray, memoryview (any shape or format: flattened to bytes) and 1-d
    uint8 numpy arrays (zero-copy when contiguous).
    """
    if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1:
        data = np.ascontiguousarray(data).data
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(
            f"expected encoded bytes, got {type(data).__name__}", sample_id=sample_id, format=format
        )
    buf: Buffer = data
    if isinstance(buf, memoryview) and (buf.format != "B" or buf.ndim != 1):
        buf = buf.cast("B") if buf.c_contiguous else buf.tobytes()
    if len(buf) == 0:
        raise DecodeError("empty input (0 bytes)", sample_id=sample_id, format=format)
    return buf


def sniff(data: Buffer) -> str | None:
    """The image format the bytes start with (`jpeg`, `png`, `gif`, `webp`, `bmp`, `tiff`):
    `ferroload_core.sniff_image`."""
    return sniff_image(data[:16])


def first_is(items: Sequence[Any], magic: bytes) -> bool:
    """Whether the first of `items` is a buffer starting with `magic`: a batch's format
    judged by its first item (a fraction of a microsecond; a mixed batch misjudged
    decodes the same pixels on a slower path)."""
    first = items[0] if len(items) else None
    return isinstance(first, bytes | bytearray | memoryview) and first[: len(magic)] == magic


def png_header(data: Buffer) -> tuple[int, int, int, int] | None:
    """(width, height, bit depth, colour type) from a PNG's IHDR, or None if malformed."""
    if len(data) < 33 or bytes(data[12:16]) != b"IHDR":
        return None
    width, height, depth, color = struct.unpack_from(">IIBB", data, 16)
    return width, height, depth, color


#: Compressed ancillary PNG chunks: text and the ICC profile. The pixels need none of them,
#: and a decoder inflates them in full: a 1 MB zTXt chunk holds 1 GiB of zeros.
_PNG_INFLATED = frozenset((b"zTXt", b"iTXt", b"iCCP"))


def webp_size(data: Buffer) -> tuple[int, int] | None:
    """(width, height) from a WebP's first chunk (VP8X canvas, VP8L or VP8 frame), or None
    if it is malformed."""
    head = bytes(data[:30])
    if len(head) < 30 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
        return None
    chunk = head[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(head[24:27], "little") + 1
        h = int.from_bytes(head[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack_from("<HH", head, 26)
        return w & 0x3FFF, h & 0x3FFF
    return None


def png_strip_inflated(data: Buffer) -> Buffer:
    """The PNG without its compressed ancillary chunks (zTXt, iTXt, iCCP), so that no
    decoder inflates them (a decompression bomb beyond `max_pixels`' reach).

    A walk of the chunk headers (length and type: one `struct` call per chunk) up to IEND;
    `data` itself comes back, uncopied, when it has no such chunk. Neither libspng nor
    Pillow applies an ICC profile or text to the pixels: they stay identical. A damaged
    chunk list stops the walk; the decoder then reports the damage.
    """
    unpack = struct.unpack_from
    n = len(data)
    pos = 8
    kept: list[Buffer] = []
    start = 0
    while pos + 8 <= n:
        length, kind = unpack(">I4s", data, pos)
        end = pos + 12 + length
        if kind in _PNG_INFLATED:
            kept.append(data[start:pos])
            start = min(end, n)
        elif kind == b"IEND":
            break
        pos = end
    if not kept:
        return data
    kept.append(data[start:])
    return b"".join(kept)


#: The most markers read before a JPEG's first scan (valid files have tens): beyond,
#: the header counts as damaged, so a file of millions of empty segments costs a bounded
#: walk.
JPEG_MAX_SEGMENTS = 4096
#: Markers without a length, which libjpeg passes over before the first scan (its
#: jdmarker.c calls them "parameterless"): RST0-7 and TEM.
JPEG_STANDALONE_MARKERS = frozenset((0x01, *range(0xD0, 0xD8)))
#: Markers whose segment (a two-byte length, then the payload) libjpeg reads or skips
#: before the first scan: frame headers, DHT, DAC, DNL, DQT, DRI, APPn and COM. Any other
#: marker there ends the header with an error in libjpeg: a second SOI, EOI ("no
#: image"), JPG, DHP, EXP, JPGn or a reserved one ("unsupported marker").
JPEG_SEGMENT_MARKERS = frozenset(
    (*JPEG_SOF_MARKERS, 0xC4, 0xCC, 0xDB, 0xDC, 0xDD, *range(0xE0, 0xF0), 0xFE)
)
#: Segments libjpeg skips by their length even when it is under 2 (it then goes on right
#: after the length); for the others a length under 2 is an error.
_JPEG_SKIPPED = frozenset((0xDC, *range(0xE0, 0xF0), 0xFE))
#: What the walk does with the byte after an FF: 0 stops (SOS, or libjpeg fails), 1
#: passes over a standalone marker, 2 reads a segment, 3 reads a segment whose length may
#: be short, 4 searches on (FF 00 and fill bytes are no marker).
_JPEG_KIND = bytes(
    4 if m in (0x00, 0xFF) else 1 if m in JPEG_STANDALONE_MARKERS
    else 3 if m in _JPEG_SKIPPED else 2 if m in JPEG_SEGMENT_MARKERS else 0
    for m in range(256)
)  # fmt: skip
#: libjpeg's search for the next marker (`next_marker`): it passes over any byte but FF
#: and any FF 00 pair (both with a warning, "extraneous bytes before marker"), then over
#: fill bytes (FF); the marker is the byte after them. Possessive: linear in the bytes.
_JPEG_NEXT_MARKER = re.compile(rb"(?:[^\xff]|\xff++\x00)*+\xff++([^\x00\xff])")


def _jpeg_segments(data: Buffer) -> Iterator[tuple[int, int, int]]:
    """(marker, start, end) of each JPEG marker segment's payload before the first scan,
    as offsets into `data` (nothing is copied), walked by libjpeg's own grammar.

    libjpeg decides the image's size from the segments it reads (jdmarker.c), so this walk
    reads the same ones: standalone markers have no length, stray bytes and FF 00 pairs
    are passed over, a segment libjpeg skips with a length under 2 is skipped from right
    after its length; the walk stops at the first scan (SOS) and at any marker that stops
    libjpeg with an error (a second SOI, EOI, an unknown marker), and after
    `JPEG_MAX_SEGMENTS` markers. A file that `jpeg_frame` sizes therefore has that
    frame as libjpeg reads it, or libjpeg fails on it.
    """
    pos, n = 2, len(data)
    for _ in range(JPEG_MAX_SEGMENTS):
        if pos + 1 < n and data[pos] == 0xFF and (kind := _JPEG_KIND[data[pos + 1]]) != 4:
            pos += 2  # the usual case: a marker right here
        else:
            found = _JPEG_NEXT_MARKER.match(data, pos)
            if found is None:  # no marker up to the end: libjpeg sees EOI, no image
                return
            pos = found.end()
            kind = _JPEG_KIND[data[pos - 1]]
        if kind == 1:
            continue
        if kind == 0 or pos + 2 > n:  # SOS, or libjpeg fails
            return
        length = (data[pos] << 8) | data[pos + 1]
        if length < 2:
            if kind == 2:
                return
            length = 2
        yield data[pos - 1], pos + 2, min(pos + length, n)
        pos += length


def jpeg_frame(data: Buffer) -> tuple[int, int, int] | None:
    """(width, height, components) from a JPEG's frame header, or None when it has no
    complete one before the scan. Four components are CMYK or YCCK, as libjpeg reads
    them."""
    for marker, start, end in _jpeg_segments(data):
        if marker in JPEG_SOF_MARKERS:
            if end - start < 6:
                return None
            _precision, height, width, components = struct.unpack_from(">BHHB", data, start)
            return width, height, components
    return None


def jpeg_frame_size(data: Buffer) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, or None when it has none before the scan."""
    frame = jpeg_frame(data)
    return None if frame is None else frame[:2]


def jpeg_orientation(data: Buffer) -> int:
    """The EXIF orientation (1-8) of a JPEG, 1 when it has none."""
    for marker, start, end in _jpeg_segments(data):
        if marker == 0xE1 and data[start : start + 6] == b"Exif\x00\x00":
            return _tiff_orientation(bytes(data[start + 6 : end]))
    return 1


def _tiff_orientation(tiff: bytes) -> int:
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    endian = "<" if tiff[:2] == b"II" else ">"
    (ifd,) = struct.unpack_from(endian + "I", tiff, 4)
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack_from(endian + "H", tiff, ifd)
    for k in range(count):
        entry = ifd + 2 + 12 * k
        if entry + 12 > len(tiff):
            break
        tag, _type, _count, value = struct.unpack_from(endian + "HHIH", tiff, entry)
        if tag == 0x0112:
            return value if 1 <= value <= 8 else 1
    return 1
