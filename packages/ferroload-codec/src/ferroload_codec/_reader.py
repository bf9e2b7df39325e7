"""Reading payloads: a file copying only what a decoder reads, and mapped-shard read-ahead.

`ByteReader` is the file (audio and video decoders read through it); over a view of a
mapped shard it asks the kernel (`MADV_WILLNEED`) to read a window ahead of each read.
`read_ahead` gives the same advice for whole payloads (a loader's images and video).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from typing import Any

import numpy as np

#: Bytes from a read's position that a reader over a memory-mapped shard asks the kernel
#: to read ahead (`MADV_WILLNEED`) before it copies (256 KiB: on 3,000 cold 1 s audio
#: crops, 128 KiB gave 1,018 clips/s, 256 KiB 1,041-1,147, 512 KiB 1,095, 1 MiB 765).
READAHEAD = 256 << 10
#: The smallest payload `read_ahead` advises (a syscall and two buffer lookups, a few us:
#: nothing measurable beside decoding a 16 KiB JPEG, too much for a 2 KB thumbnail). From
#: a cold page cache, 6,000 21 KB JPEGs resized to 224: 1,333-1,724 images/s without the
#: advice, 3,748-4,089 with it (from memory: 4,047-4,093).
WHOLE_READ_MIN_BYTES = 16 << 10
_WILLNEED: int | None = getattr(mmap, "MADV_WILLNEED", None)


def _address(buf: Any) -> int:
    return int(np.frombuffer(buf, np.uint8).ctypes.data)


def mapped_offset(
    view: memoryview, origins: dict[int, int] | None = None
) -> tuple[mmap.mmap, int] | None:
    """The memory map under `view` and where `view` starts in it; None for any other
    buffer (or where the platform has no `MADV_WILLNEED`). `origins` keeps each map's
    address (by `id`) across calls over views of the same maps (half the cost a view)."""
    base = view.obj
    if _WILLNEED is None or not isinstance(base, mmap.mmap) or not view.nbytes:
        return None
    origin = None if origins is None else origins.get(id(base))
    if origin is None:
        origin = _address(base)
        if origins is not None:
            origins[id(base)] = origin
    return base, _address(view) - origin


def _advise(mapped: mmap.mmap, start: int, end: int) -> bool:
    """`MADV_WILLNEED` over bytes `[start, end)` of `mapped` (from the page holding
    `start`); False if the kernel refused."""
    first = start // mmap.PAGESIZE * mmap.PAGESIZE  # madvise wants whole pages
    try:
        mapped.madvise(_WILLNEED, first, end - first)  # type: ignore[arg-type]
    except (OSError, ValueError):
        return False
    return True


def read_ahead(
    items: Iterable[Any], min_bytes: int = WHOLE_READ_MIN_BYTES, *, largest: int | None = None
) -> None:
    """Ask the kernel to read ahead, whole, each item of at least `min_bytes` that is a
    view of a memory-mapped file (a payload from a local shard), without waiting for it.

    A loader calls it on the payloads of a batch that its decoders read whole (images,
    video) when the batch is prepared, while the batch before it decodes: on a cold page
    cache, each payload is then read in one request beside the decoding, instead of page
    by page (shards are mapped for random access) while a decode thread waits. `largest`,
    when the caller knows it (a loader reads the sizes from the index), bounds the items'
    sizes: below `min_bytes`, the items are not looked at (a batch of 256 thumbnails:
    7.7 us a batch otherwise)."""
    if largest is not None and largest < min_bytes:
        return
    origins: dict[int, int] = {}  # the maps stay alive through the views for the call
    for item in items:
        if type(item) is not memoryview or item.nbytes < min_bytes:
            continue
        found = mapped_offset(item, origins)
        if found is not None and not _advise(found[0], found[1], found[1] + item.nbytes):
            return


class ByteReader:
    """A read-only, seekable file over encoded bytes, for decoders that read files
    (libsndfile's virtual I/O, PyAV's Python I/O).

    `io.BytesIO` copies a memoryview or bytearray whole when it is made: for a clip mapped
    from a shard, that reads (and copies) every page of it when a crop needs a fraction,
    and holds a second copy of a long video for as long as it is decoded. This hands the
    decoder only what it asks for, straight from the buffer. It seeks, tells and reads
    like `BytesIO`: a seek past the end is allowed (reads there return nothing), a
    relative seek before the start stops at 0, an absolute negative one is a ValueError.

    Over a view of a memory-mapped file (a loader's payload from a local shard), each read
    first asks the kernel to read ahead `READAHEAD` bytes from its position (once per
    such window): the store maps shards for random access (no read-around), so on a
    cold page cache every 4 KiB page a decoder touched was a disk read of its own, made
    while the copying thread held the GIL (3,000 cold 1 s audio crops: 60,831 major
    page faults and 625 clips/s; 3,402 and 1,147 clips/s with the advice).
    """

    __slots__ = ("_advised", "_at", "_buf", "_map", "_pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self._buf = memoryview(buf)
        self._pos = 0
        # the mapping under the view and where the view starts in it, for the advice
        self._map: mmap.mmap | None = None
        self._at = 0
        self._advised = (0, 0)  # [start, end) of the buffer already advised
        found = mapped_offset(self._buf)
        if found is not None:
            self._map, self._at = found

    def _read_ahead(self, pos: int, n: int) -> None:
        """Advise the kernel to read `[pos, pos + max(n, READAHEAD))` of the mapping,
        unless `[pos, pos + n)` was advised already. Advice that fails turns it off."""
        lo, hi = self._advised
        if self._map is None or (lo <= pos and pos + n <= hi):
            return
        end = min(len(self._buf), pos + max(n, READAHEAD))
        if not _advise(self._map, self._at + pos, self._at + end):
            self._map = None
            return
        self._advised = (pos, end)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            if offset < 0:
                raise ValueError(f"negative seek value {offset}")
            self._pos = offset
        elif whence in (1, 2):
            self._pos = max(0, (self._pos if whence == 1 else len(self._buf)) + offset)
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        return self._pos

    def readinto(self, out: Any) -> int:
        """Copy the next bytes into the writable buffer `out`; how many came."""
        pos = self._pos
        n = max(0, min(len(out), len(self._buf) - pos))
        if self._map is not None and n:
            self._read_ahead(pos, n)
        out[:n] = self._buf[pos : pos + n]
        self._pos = pos + n
        return n

    def read(self, size: int | None = -1) -> bytes:
        pos = self._pos
        end = len(self._buf) if size is None or size < 0 else min(len(self._buf), pos + size)
        if self._map is not None and end > pos:
            self._read_ahead(pos, end - pos)
        data = bytes(self._buf[pos:end]) if end > pos else b""
        self._pos = max(pos, end)
        return data
