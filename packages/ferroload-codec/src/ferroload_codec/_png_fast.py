"""The lean decode paths for batches of small 8-bit PNGs already at the output size and mode.

Two routes, both libspng's pixels:

* **stacked** (a part of a batch, one call each to libtiff and libspng): the parts' IDAT
  streams become the strips of one TIFF, which libtiff inflates (with libdeflate) in a
  single call; the filtered rows then go, stored uncompressed, into one PNG of all the
  images stacked, which libspng unfilters in a single call, straight into the batch.
  Each part drops the GIL twice, however many images it holds.
* **per image** (`LeanPng.one`): libspng on the image itself, straight into the batch.

Why: a 32x32 photo costs ~30-45 us in libspng, and a thread that drops and retakes the
GIL for every image waits on the other threads doing the same: on 2 cores two threads
gave only ~1.3x one thread's images/s, and about 1.5x the CPU per image.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ferroload_codec._backends import imagecodecs
from ferroload_codec._sniff import png_strip_inflated
from ferroload_core import PNG_MAGIC

# A PNG's signature and the length and type of its first chunk, the header
_PNG_HEAD = PNG_MAGIC + b"\x00\x00\x00\rIHDR"
#: The signature, IHDR, and empty IDAT and IEND chunks: the smallest PNG
_MIN_PNG = 57
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
#: The largest filtered image (rows of a filter byte and the pixels) the stacked route
#: takes: it is for tiny images, whose per-call costs outweigh their decoding
STACK_MAX_RAW = 0xFFFF
#: The fewest images in one part of a batch on the stacked route
STACK_MIN = 8
#: Parts per decode thread: the calling thread starts late (it reads the next batch
#: first), so more, smaller parts than threads keep the threads even
PARTS_PER_THREAD = 2
#: A stored deflate block holds at most this many bytes
_STORED_BLOCK = 0xFFFF
#: Bit 5 of a chunk type's first byte: set (lower case) for an ancillary chunk, one that
#: libspng's pixels never depend on (imagecodecs' `spng_decode` applies no gamma,
#: transparency or background)
_ANCILLARY = 0x20
#: TIFF tags of the strip file, in order: (tag, type) with 3 SHORT and 4 LONG
_TIFF_TAGS = struct.Struct("<H" + "HHII" * 10 + "I")
_TIFF_HEAD = b"II*\x00\x08\x00\x00\x00"


class LeanPng:
    """The lean routes for one decoder's output size and channels (see the module)."""

    def __init__(self, ic: Any, size: tuple[int, int], channels: int) -> None:
        self.height, self.width = size
        self.channels = channels
        self.color = {1: 0, 3: 2, 4: 6}[channels]
        #: bytes of one filtered row: the filter type and the pixels
        self.row = 1 + self.width * channels
        self.raw_size = self.height * self.row
        self._spng = ic.spng_decode
        self._tiff: Any = getattr(ic, "tiff_decode", None)

    # ------------------------------------------------------------------ one image

    def _spans(self, item: Any) -> list[tuple[int, int]] | None:
        """Where `item`'s IDAT data lies, `(start, end)` per IDAT chunk, when it is an
        8-bit PNG of this size and mode, not interlaced, with no critical chunk but IHDR,
        IDAT and IEND; else None. Nothing is copied (the stacked route slices)."""
        kind = type(item)  # exact types only: this runs once per image
        if kind is not bytes and kind is not memoryview:
            return None
        size = len(item)
        if size < _MIN_PNG:
            return None
        # struct reads the header fields straight from the buffer: slicing a memoryview
        # (a loader's payloads are views of mapped shards) and comparing the slice costs
        # more than the whole unpack
        head, width, height, depth, color, method, filt, laced, length, chunk = struct.unpack_from(
            ">16sIIBBBBB4xI4s", item
        )
        if (
            head != _PNG_HEAD
            or width != self.width
            or height != self.height
            or depth != 8
            or color != self.color
            or method
            or filt
            or laced
        ):
            return None
        # IHDR, one IDAT, IEND: what most encoders write for a small image
        end = 41 + length
        if chunk == b"IDAT" and end + 12 <= size and item[end + 8 : end + 12] == b"IEND":
            return [(41, end)]
        return self._walk(item, size)

    @staticmethod
    def _walk(item: Any, size: int) -> list[tuple[int, int]] | None:
        """`_spans` of a PNG with ancillary chunks or several IDAT chunks (one `struct`
        call per chunk), or None for anything else."""
        unpack = struct.unpack_from
        pos = 33
        spans: list[tuple[int, int]] = []
        last = b""
        while pos + 12 <= size:
            length, kind = unpack(">I4s", item, pos)
            end = pos + 12 + length
            if end > size:
                return None
            if kind == b"IDAT":
                if spans and last != b"IDAT":
                    return None  # IDAT chunks must follow each other
                spans.append((pos + 8, end - 4))
            elif kind == b"IEND":
                return spans or None
            elif not kind[0] & _ANCILLARY:
                return None  # PLTE and the unknown: libspng decides
            last = kind
            pos = end
        return None

    def one(self, item: Any, target: npt.NDArray[np.uint8]) -> bool:
        """Decode `item` into `target` with libspng on this route, or return False for
        the general path (which also reports every error). A PNG with compressed
        ancillary chunks (text, ICC profile) goes to libspng without them, so that it
        never inflates them."""
        spans = self._spans(item)
        if spans is None:
            return False
        if len(spans) > 1 or len(item) != _MIN_PNG + spans[0][1] - spans[0][0]:
            item = png_strip_inflated(item)  # more chunks than IHDR, IDAT, IEND
        try:
            self._spng(item, out=target)
        except Exception:
            return False
        return True

    # ------------------------------------------------------------------ many images

    def parts(self, n: int, threads: int) -> list[tuple[int, int]] | None:
        """Contiguous `(lo, hi)` ranges of a batch of `n` for the stacked route (about
        `PARTS_PER_THREAD` a thread, each of at least `STACK_MIN` images), or None where
        it does not apply (no libtiff, large images, a small batch)."""
        if self._tiff is None or self.raw_size > STACK_MAX_RAW:
            return None
        m = min(threads * PARTS_PER_THREAD, n // STACK_MIN)
        if m < 1:
            return None
        bounds = [n * j // m for j in range(m + 1)]
        return list(itertools.pairwise(bounds))

    def stack(
        self, items: Sequence[Any], lo: int, hi: int, out: npt.NDArray[np.uint8]
    ) -> list[int]:
        """Decode `items[lo:hi]` into `out[lo:hi]` (a C-contiguous batch) on the stacked
        route; return the indices left for `one` and the general path: the images not
        on this route, or all of them when libtiff or libspng fails (a damaged image is
        then reported by the path that decodes it alone)."""
        taken: list[int] = []
        streams: list[Any] = []
        rest: list[int] = []
        for i in range(lo, hi):
            item = items[i]
            spans = self._spans(item)
            if spans is None:
                rest.append(i)
                continue
            if len(spans) == 1:
                start, end = spans[0]
                stream = item[start:end]
            else:
                stream = b"".join([item[start:end] for start, end in spans])
            if len(stream):
                taken.append(i)
                streams.append(stream)
            else:
                rest.append(i)
        k = len(taken)
        if k < 2:  # (a TIFF stores one strip's offset in its tag, not in an array)
            return list(range(lo, hi))
        whole = k == hi - lo
        target = out[lo:hi] if whole else np.empty((k, *out.shape[1:]), np.uint8)
        try:
            rows = self._inflate(streams)
            _unfilter_first_rows(rows, self.channels)
            pixels = target.view()
            pixels.shape = (k * self.height, self.width, self.channels)
            if self.channels == 1:  # libspng writes a grey image into an (h, w) array
                pixels = pixels[..., 0]
            self._spng(self._stacked_png(rows), out=pixels)
        except Exception:
            return list(range(lo, hi))
        if not whole:
            out[taken] = target
        return rest

    def _inflate(self, streams: list[Any]) -> npt.NDArray[np.uint8]:
        """The filtered rows of each image, `(k, height, row)`: the zlib streams as the
        deflate-compressed strips (one image each) of one 8-bit grey TIFF as wide as a
        filtered row, which libtiff inflates in one call. A stream that does not inflate
        to exactly the image's rows, or fails its Adler-32, fails the call."""
        k = len(streams)
        lengths = np.fromiter(map(len, streams), np.uint32, k)
        arrays = 8 + _TIFF_TAGS.size
        data = arrays + 8 * k
        if data + int(lengths.sum(dtype=np.uint64)) >= 1 << 32:
            raise ValueError("too large for one TIFF")
        offsets = np.empty(k, np.uint32)
        offsets[0] = data
        np.cumsum(lengths[:-1], out=offsets[1:])
        offsets[1:] += data
        tags = _TIFF_TAGS.pack(
            10,
            256, 3, 1, self.row,  # ImageWidth
            257, 4, 1, k * self.height,  # ImageLength
            258, 3, 1, 8,  # BitsPerSample
            259, 3, 1, 8,  # Compression: deflate (zlib streams)
            262, 3, 1, 1,  # Photometric: min is black
            273, 4, k, arrays,  # StripOffsets
            277, 3, 1, 1,  # SamplesPerPixel
            278, 4, 1, self.height,  # RowsPerStrip
            279, 4, k, arrays + 4 * k,  # StripByteCounts
            284, 3, 1, 1,  # PlanarConfiguration: contiguous
            0,
        )  # fmt: skip
        tiff = b"".join([_TIFF_HEAD, tags, offsets.tobytes(), lengths.tobytes(), *streams])
        rows: npt.NDArray[np.uint8] = self._tiff(tiff)
        if rows.dtype != np.uint8 or rows.shape != (k * self.height, self.row):
            raise ValueError(f"libtiff returned {rows.dtype} {rows.shape}")
        return rows.reshape(k, self.height, self.row)

    def _stacked_png(self, rows: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        """One PNG of the images stacked top to bottom, its filtered `rows` stored in
        uncompressed deflate blocks, written into one buffer (one copy of the rows)."""
        raw = rows.reshape(-1)
        n = raw.size
        blocks = -(-n // _STORED_BLOCK)
        size = 2 + 5 * blocks + n + 4  # the IDAT chunk's data: zlib header, blocks, Adler
        png = np.empty(33 + 8 + size + 4 + len(_IEND), np.uint8)
        ihdr = b"IHDR" + struct.pack(">IIBBBBB", self.width, len(rows) * self.height, 8,
                                     self.color, 0, 0, 0)  # fmt: skip
        head = PNG_MAGIC + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr))
        png[:33] = np.frombuffer(head, np.uint8)
        png[33:43] = np.frombuffer(struct.pack(">I", size) + b"IDAT\x78\x01", np.uint8)
        pos = 43
        for start in range(0, n, _STORED_BLOCK):
            end = min(n, start + _STORED_BLOCK)
            length = end - start
            block = struct.pack("<BHH", end == n, length, length ^ 0xFFFF)
            png[pos : pos + 5] = np.frombuffer(block, np.uint8)
            png[pos + 5 : pos + 5 + length] = raw[start:end]
            pos += 5 + length
        png[pos : pos + 4] = np.frombuffer(struct.pack(">I", zlib.adler32(raw.data)), np.uint8)
        pos += 4
        crc = zlib.crc32(png[37:pos].data)  # the chunk's type and data
        png[pos : pos + 4] = np.frombuffer(struct.pack(">I", crc), np.uint8)
        png[pos + 4 :] = np.frombuffer(_IEND, np.uint8)
        return png


def _unfilter_first_rows(rows: npt.NDArray[np.uint8], bpp: int) -> None:
    """Make each image's first row independent of the row above it, which in the stacked
    PNG is the previous image's last: over a row of zeros, Up is None and Paeth is Sub
    (its predictor is the left pixel); Average is undone here (its left neighbours only)
    and marked None. Other filter types are left for libspng to refuse."""
    first = rows[:, 0]
    kinds = first[:, 0].copy()
    first[kinds == 2, 0] = 0
    first[kinds == 4, 0] = 1
    avg = np.flatnonzero(kinds == 3)
    if avg.size:
        line = first[avg, 1:].astype(np.uint16)
        for x in range(bpp, line.shape[1], bpp):
            line[:, x : x + bpp] += line[:, x - bpp : x] >> 1
            line[:, x : x + bpp] &= 0xFF
        first[avg, 1:] = line
        first[avg, 0] = 0


def same_size_png(
    size: tuple[int, int] | None, channels: int, *, max_pixels: int, exif: bool
) -> LeanPng | None:
    """The lean routes for a batch of PNGs at the output `size` and `channels`, or None
    where they do not apply (no imagecodecs, no fixed size, EXIF orientation, an output
    over `max_pixels`). Decoders that augment or convert their output do not ask."""
    ic = imagecodecs()
    if ic is None or size is None or exif or size[0] * size[1] > max_pixels:
        return None
    return LeanPng(ic, size, channels)
